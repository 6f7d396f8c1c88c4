"""The benchmark's instruments and arithmetic (bench/): audit and Helm tallies, /proc readings,
growth fits, tenant generation. The benchmark itself runs end to end in e2e/tests/test_bench_smoke.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from bench import report  # noqa: E402
from bench.__main__ import parse_args  # noqa: E402
from bench.measure import HelmShim, cpu_seconds, kubeconfig_waits, rss_mib, tally_helm_log, tally_requests  # noqa: E402
from bench.tenants import TRUST_ORDER, generate_tenants  # noqa: E402
from gputenant.api.v1alpha1 import GpuTenant  # noqa: E402
from gputenant.config.models import OperatorConfig  # noqa: E402
from gputenant.policy.choose import decide  # noqa: E402


def event(user: str, verb: str, resource: str, uri: str = "", subresource: str = "", namespace: str = "") -> dict:
    ref = {"resource": resource, **({"subresource": subresource} if subresource else {}),
           **({"namespace": namespace} if namespace else {})}
    return {"user": {"username": user}, "verb": verb, "objectRef": ref, "requestURI": uri}


def test_request_tally_counts_one_user_by_verb_and_resource():
    events = [
        event("op", "list", "roles", "/apis/rbac.authorization.k8s.io/v1/roles?labelSelector=gputenant.io%2Ftenant%3Da"),
        event("op", "list", "roles", "/apis/rbac.authorization.k8s.io/v1/roles?labelSelector=gputenant.io%2Ftenant%3Db"),
        event("op", "patch", "gputenants", subresource="status"),
        event("op", "create", "events"),
        event("someone-else", "delete", "namespaces"),
        {"user": {"username": "op"}, "verb": "get", "requestURI": "/version"},
    ]
    tally = tally_requests(events, "op")
    assert (tally.total, tally.writes, tally.reads) == (5, 2, 3)
    assert tally.writes_by_resource() == {"create events": 1, "patch gputenants/status": 1}
    assert set(tally.listed_selectors) == {"gputenant.io/tenant=a", "gputenant.io/tenant=b"}
    assert tally.by_resource[("get", "/version")] == 1


def timed(at: str, user: str, verb: str, resource: str, namespace: str, name: str = "", subresource: str = "") -> dict:
    found = event(user, verb, resource, subresource=subresource, namespace=namespace)
    found["objectRef"]["name"] = name
    return {**found, "requestReceivedTimestamp": f"2026-11-26T10:00:{at}Z"}


def test_kubeconfig_waits_run_from_the_last_pod_status_write_to_the_operators_first_kubeconfig_write():
    events = [
        timed("05.000000", "op", "patch", "secrets", "tenant-b", "b-kubeconfig-admin"),  # before any pod status
        timed("01.000000", "kubelet", "patch", "pods", "tenant-a", "a-0", "status"),
        timed("03.500000", "kubelet", "patch", "pods", "tenant-a", "a-0", "status"),
        timed("04.000000", "op", "get", "secrets", "tenant-a", "a-kubeconfig-admin"),
        timed("04.000000", "someone", "patch", "secrets", "tenant-a", "a-kubeconfig-admin"),
        timed("04.250000", "op", "patch", "secrets", "tenant-a", "a-kubeconfig-view"),
        timed("05.000000", "op", "patch", "secrets", "tenant-a", "a-kubeconfig-admin"),
        timed("09.000000", "kubelet", "patch", "pods", "tenant-a", "a-0", "status"),
        timed("10.000000", "op", "patch", "secrets", "tenant-a", "a-kubeconfig-admin"),  # a later rotation
        timed("02.000000", "kubelet", "update", "pods", "tenant-c", "c-0", "status"),
        timed("06.000000", "op", "patch", "secrets", "tenant-c", "c-kubeconfig-admin"),
    ]
    assert kubeconfig_waits(events, "op", "-kubeconfig-admin") == [1.5, 4.0]


def test_percentile_is_the_element_at_the_rounded_index():
    assert report.percentile([3.0, 1.0, 2.0, 4.0, 5.0], 0.5) == 3.0
    assert report.percentile([4.0, 3.0, 2.0, 1.0], 0.5) == 3.0  # index 1.5 rounds to 2
    assert report.percentile([float(n) for n in range(1, 101)], 0.95) == 95.0
    assert report.percentile([7.0], 0.99) == 7.0


def test_helm_tally_counts_subcommands_and_overlap():
    lines = ["start 1 10.0 upgrade", "start 2 10.5 status", "end 2 11.0 0", "start 3 11.0 upgrade",
             "end 1 12.0 0", "end 3 13.0 1", "garbage"]
    tally = tally_helm_log(lines)
    assert tally.invocations == 3
    assert tally.installs_or_upgrades == 2
    assert tally.max_concurrent == 2  # an end and a start at the same instant do not overlap


def test_helm_shim_logs_each_call_and_passes_arguments_and_status(tmp_path: Path):
    real = tmp_path / "real-helm"
    real.write_text('#!/bin/sh\necho "args: $*"\nexit 3\n')
    real.chmod(0o755)
    shim = HelmShim(tmp_path / "shim", real)
    start = shim.offset()
    answer = subprocess.run(["helm", "upgrade", "--install", "x"], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{shim.bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert answer.returncode == 3
    assert answer.stdout.strip() == "args: upgrade --install x"
    tally = shim.tally(start)
    assert tally.by_subcommand == {"upgrade": 1}
    assert shim.tally(shim.offset()).invocations == 0


def test_proc_readings_of_this_process():
    before = cpu_seconds(os.getpid())
    # /proc counts CPU time in clock ticks (10 ms): spin until one passes, or 5 s of CPU time
    deadline = time.process_time() + 5
    while (after := cpu_seconds(os.getpid())).own <= before.own and time.process_time() < deadline:
        sum(i * i for i in range(100_000))
    assert after.own > before.own
    current, peak = rss_mib(os.getpid())
    assert 5 < current <= peak


@pytest.mark.parametrize("exponent", [1.0, 2.0])
def test_growth_exponent_recovers_a_power_law(exponent: float):
    points = [(n, 3 * n ** exponent) for n in (50, 100, 200)]
    assert report.growth_exponent(points) == pytest.approx(exponent)
    assert ("SUPER-LINEAR" in report.growth_verdict(exponent)) == (exponent > report.SUPERLINEAR_EXPONENT)


def test_growth_exponent_needs_two_sizes():
    assert report.growth_exponent([(50, 1.0), (50, 2.0)]) is None


def test_paired_ratio_median_skips_missing_runs():
    assert report.paired_ratio_median([(10, 20), (30, 20), (None, 5), (4, 0)]) == pytest.approx(1.0)


def test_table_aligns_columns():
    lines = report.table(["a", "bb"], [["xyz", "1"]]).splitlines()
    assert lines == ["| a   | bb |", "|-----|----|", "| xyz |  1 |"]


def test_generated_tenants_mix_trust_and_are_valid_and_possible():
    config = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
    tenants = generate_tenants(7, "t-")
    assert [t["spec"]["trust"] for t in tenants] == [TRUST_ORDER[i % 3] for i in range(7)]
    assert len({t["metadata"]["name"] for t in tenants}) == 7
    for body in tenants:
        tenant = GpuTenant.from_body(body)
        assert not tenant.spec.prevent_deletion
        assert decide(body["metadata"]["name"], tenant.spec, config).possible


def test_arguments_name_the_flag_and_the_fix(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--sizes", "50,lots"])
    error = capsys.readouterr().err
    assert "--sizes" in error and "e.g. 50,100,200" in error
    with pytest.raises(SystemExit):
        parse_args(["--skip", "everything"])
    assert "choose from onboarding, steady, memory, webhook" in capsys.readouterr().err
    quick = parse_args(["--quick"])
    assert (quick.sizes, quick.repeats) == ([6], 1)
