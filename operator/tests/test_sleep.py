"""Sleep and the idle policy, the pure parts: the chart value that scales the control plane to zero,
the spec's shape, KAI's preemptibility rule and the idle verdict. (Sleep and wake of a real vCluster:
e2e/tests/test_sleep_wake.py; the usage read and idle sleep against the API: e2e/tests/test_usage.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from gputenant.api import conditions as reasons
from gputenant.api.status import UsageStatus
from gputenant.api.v1alpha1 import GpuTenant, SleepSpec
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from gputenant.render import render_tenant
from gputenant.timefmt import rfc3339
from gputenant.usage.idle import idle_sleep_verdict, non_preemptible, non_preemptible_pods

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_VALUES_SCHEMA = REPO_ROOT / ".." / "shared" / "third_party" / "vcluster-0.36.1" / "values.schema.json"
CONFIG = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def tenant(**sleep) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": "team-a"}, "spec": {
        "trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}], "gpu": {"quota": 1}, "sleep": sleep}})


def values(body: GpuTenant) -> dict:
    return render_tenant(body, decide(body.name, body.spec, CONFIG), CONFIG).vcluster_values


def test_asleep_scales_the_control_plane_to_zero_through_a_chart_value_the_schema_knows():
    asleep = values(tenant(asleep=True))
    assert asleep["controlPlane"]["statefulSet"]["highAvailability"] == {"replicas": 0}
    if UPSTREAM_VALUES_SCHEMA.is_file():
        jsonschema.validate(asleep, json.loads(UPSTREAM_VALUES_SCHEMA.read_text()))


def test_an_awake_tenant_renders_the_values_it_had_before_sleep_existed():
    """No new key for awake tenants: their values hash, hence their Helm release, stays as it was."""
    assert values(tenant(asleep=False)) == values(tenant())
    assert "highAvailability" not in values(tenant())["controlPlane"]["statefulSet"]


def test_idle_after_is_a_bounded_duration_naming_the_field():
    assert SleepSpec.model_validate({"idle": {"after": "2h"}}).idle.after == "2h"
    for bad in ("5m", "2 hours", "9000h"):
        with pytest.raises(ValidationError, match="after"):
            SleepSpec.model_validate({"idle": {"after": bad}})
    with pytest.raises(ValidationError):
        SleepSpec.model_validate({"asleep": "sometimes"})


def pod(name: str, priority: int | None = None, label: str | None = None, group: str | None = None,
        phase: str = "Running") -> dict:
    metadata: dict = {"name": name, "labels": {}, "annotations": {}}
    if label:
        metadata["labels"]["kai.scheduler/preemptibility"] = label
    if group:
        metadata["annotations"]["pod-group-name"] = group
    return {"metadata": metadata, "spec": {"priority": priority} if priority is not None else {},
            "status": {"phase": phase}}


@pytest.mark.parametrize(("candidate", "groups", "expected"), [
    (pod("train", priority=50), {}, False),            # KAI's train class
    (pod("interactive", priority=75), {}, False),      # interactive-preemptible
    (pod("build", priority=100), {}, True),            # build: priority >= 100 is non-preemptible
    (pod("inference", priority=125), {}, True),
    (pod("no-priority"), {}, False),
    (pod("label-wins-over-priority", priority=125, label="preemptible"), {}, False),
    (pod("label-protects", priority=50, label="non-preemptible"), {}, True),
    (pod("semi", priority=50, label="semi-preemptible"), {}, True),
    (pod("group-wins", priority=50, label="preemptible", group="pg"), {"pg": "non-preemptible"}, True),
    (pod("group-unset", priority=125, group="pg"), {"pg": ""}, True),
    (pod("bad-label-falls-back", priority=50, label="never"), {}, False),
])
def test_preemptibility_follows_kai(candidate, groups, expected):
    assert non_preemptible(candidate, groups) is expected


def test_finished_or_terminating_pods_do_not_hold_sleep_back():
    done = pod("done", priority=125, phase="Succeeded")
    leaving = pod("leaving", priority=125)
    leaving["metadata"]["deletionTimestamp"] = rfc3339(NOW)
    assert non_preemptible_pods([done, leaving, pod("serving", priority=125), pod("train", priority=50)], {}) \
        == ["serving"]


def usage(idle_since: datetime | None, gpus: int = 2) -> UsageStatus:
    return UsageStatus(window="1h", gpus_held=gpus, idle_gpu_count=gpus if idle_since else 0,
                       all_idle_since=rfc3339(idle_since) if idle_since else None, observed_at=rfc3339(NOW))


IDLE = SleepSpec.model_validate({"idle": {"after": "2h"}})


@pytest.mark.parametrize(("sleep", "summary", "holding_back", "reason"), [
    (SleepSpec(), usage(NOW - timedelta(hours=5)), [], reasons.NO_IDLE_POLICY),
    (SleepSpec.model_validate({"asleep": True, "idle": {"after": "2h"}}), usage(NOW - timedelta(hours=5)), [],
     reasons.SLEEP_REQUESTED),
    (IDLE, None, [], reasons.GPUS_WORKING),
    (IDLE, usage(None), [], reasons.GPUS_WORKING),
    (IDLE, usage(NOW - timedelta(hours=1, minutes=59)), [], reasons.IDLE_NOT_LONG_ENOUGH),
    (IDLE, usage(NOW - timedelta(hours=3)), ["serve-0"], reasons.NON_PREEMPTIBLE_WORKLOAD),
    (IDLE, usage(NOW - timedelta(hours=2)), [], reasons.IDLE_GPUS),
])
def test_idle_verdict(sleep, summary, holding_back, reason):
    verdict = idle_sleep_verdict(sleep, summary, NOW, holding_back)
    assert verdict.reason == reason
    assert verdict.sleep is (reason == reasons.IDLE_GPUS)


def test_a_held_back_verdict_names_the_non_preemptible_pods_capped():
    verdict = idle_sleep_verdict(IDLE, usage(NOW - timedelta(hours=3)), NOW, [f"serve-{i}" for i in range(5)])
    assert "5 non-preemptible pod(s) run: serve-0, serve-1, serve-2, ..." in verdict.message
