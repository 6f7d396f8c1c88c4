"""A KAI-Scheduler outside the supported minor is a named pool problem (pools.kai_version)."""

from __future__ import annotations

import pytest

from gputenant.config.models import OperatorConfig
from gputenant.guard.kai_key_uses import KAI_VERSION
from gputenant.pools.kai_version import SUPPORTED_MINOR, component_tags, kai_version_problems
from gputenant.pools.report import format_table, pool_reports


def kai_config(**tags: str) -> dict:
    """The Config KAI's chart writes, with one image tag per component."""
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
            "spec": {"namespace": "kai-scheduler", "global": {"replicaCount": 1},
                     **{component: {"service": {"enabled": True, "image": {"name": component, "tag": tag}}}
                        for component, tag in tags.items()}}}


def test_the_supported_minor_is_the_one_the_guards_key_table_comes_from():
    assert KAI_VERSION.startswith(f"v{SUPPORTED_MINOR[0]}.{SUPPORTED_MINOR[1]}.")


def test_every_component_tag_is_read():
    assert component_tags(kai_config(binder="v0.12.0", scheduler="v0.12.3")) == {"binder": "v0.12.0",
                                                                                 "scheduler": "v0.12.3"}


@pytest.mark.parametrize("tag", ["v0.12.0", "v0.12.17", "0.12.4", "v0.12.1-rc.1", "latest", "sha-1a2b3c", "0.0.0"])
def test_a_supported_or_unreadable_tag_is_no_problem(tag):
    assert kai_version_problems(kai_config(binder=tag, scheduler=tag)) == []


@pytest.mark.parametrize("tag", ["v0.13.0", "v0.11.9", "v1.0.0", "0.17.0"])
def test_a_component_outside_the_supported_minor_is_named_with_its_tag(tag):
    [problem] = kai_version_problems(kai_config(binder="v0.12.0", scheduler=tag))
    assert problem.startswith(f"KaiVersionUnsupported: KAI-Scheduler's scheduler runs {tag} (Config kai-config)")
    assert "outside the supported v0.12.x" in problem


def test_no_config_is_no_problem():
    assert kai_version_problems(None) == []


def test_the_pools_table_prints_it_for_every_pool():
    config = OperatorConfig.model_validate({"pools": [
        {"name": "a", "mode": "Exclusive", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920},
        {"name": "b", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81920}]})
    reports = pool_reports(config, [], [], kai_config=kai_config(scheduler="v0.13.0"))
    assert [line.split(": ")[0:2] for line in format_table(reports).splitlines() if line.startswith("PROBLEM")] == [
        ["PROBLEM a", "KaiVersionUnsupported"], ["PROBLEM b", "KaiVersionUnsupported"]]
