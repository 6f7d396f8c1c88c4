"""`gputenant usage` against a real Prometheus (Debian's package, kubeplane/prometheus.py) scraping
the simulated dcgm-exporter (kubeplane/dcgm_exporter.py: GPU hardware is the one thing simulated),
and GpuTenants on the real control plane. The "spinning" GPU reproduces what was measured on an
H100: one block on 1 of 132 SMs reads GPU_UTIL 100% while SM activity is 0.8%.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from gputenant import KIND
from gputenant.config.models import OperatorConfig
from gputenant.kube import KubeClient
from gputenant.timefmt import rfc3339
from gputenant.usage import UsageQueries, read_usage, tenant_namespaces
from gputenant.usage.publish import API_VERSION, Published, publish_usage
from kubeplane.dcgm_exporter import DcgmExporter, SimulatedGpu
from kubeplane.process import free_ports
from kubeplane.prometheus import Prometheus

GPUTENANT = Path(sys.executable).parent / "gputenant"
SCRAPED_SECONDS = 20
GPUS = {
    # tenant: (pod, UUID, SM_ACTIVE, GPU_UTIL %)
    "usage-idle": ("notebook-0", "GPU-idle", 0.0, 0.0),
    "usage-spin": ("trainer-0", "GPU-spin", 0.008, 100.0),
    "usage-work": ("trainer-0", "GPU-work", 0.999, 100.0),
    "usage-serve": ("serve-0", "GPU-serve", 0.0, 0.0),
}
IDLE_POLICY = {"usage-idle", "usage-serve"}
"""Tenants with spec.sleep.idle; usage-serve runs a non-preemptible pod (KAI: priority >= 100)."""
IDLE_AFTER = timedelta(minutes=10)


@pytest.fixture(scope="module")
def exporter():
    gpus = [SimulatedGpu(f"tenant-{tenant}", pod, uuid, sm_active, gpu_util)
            for tenant, (pod, uuid, sm_active, gpu_util) in GPUS.items()]
    with DcgmExporter([*gpus, SimulatedGpu("kube-system", "other-0", "GPU-other", 0.0, 0.0)]) as running:
        yield running.address


@pytest.fixture(scope="module")
def prometheus(exporter, tmp_path_factory):
    with Prometheus(tmp_path_factory.mktemp("prometheus-usage"), targets=[exporter], job="dcgm-exporter") as server:
        server.wait_for_target_up()
        time.sleep(SCRAPED_SECONDS)
        yield server


@pytest.fixture(scope="module")
def usage_tenants(plane, crds):
    names = [*GPUS, "usage-none"]
    manifests = [{"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
                  "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "u"}], "gpu": {"quota": 1},
                           **({"sleep": {"idle": {"after": "10m"}}} if name in IDLE_POLICY else {})}}
                 for name in names]
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all(manifests))
    yield names
    plane.kubectl("delete", "gputenant", *names, "--wait=false", "--ignore-not-found")


def usage(plane, prometheus, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(GPUTENANT), "usage", "--kubeconfig", str(plane.kubeconfig_path), "--prometheus-url",
                           prometheus.url, *extra], capture_output=True, text=True, timeout=60)


def test_idle_and_busy_but_not_working_gpus_are_told_apart_by_sm_activity(plane, prometheus, usage_tenants):
    result = usage(plane, prometheus, "--window", f"{SCRAPED_SECONDS}s", "--step", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = {entry["tenant"]: entry for entry in json.loads(result.stdout)}
    assert set(report) == set(usage_tenants)
    assert report["usage-idle"]["idle"] == [{"pod": "notebook-0", "gpu": "GPU-idle"}]
    assert report["usage-idle"]["busyNotWorking"] == []
    [spinning] = report["usage-spin"]["busyNotWorking"]
    assert (spinning["pod"], spinning["gpu"], spinning["gpuUtil"]) == ("trainer-0", "GPU-spin", 100.0)
    assert spinning["smActive"] == pytest.approx(0.008)
    assert report["usage-spin"]["idle"] == []
    assert report["usage-work"]["idle"] == report["usage-work"]["busyNotWorking"] == []
    assert report["usage-none"]["gpus"] == 0 and report["usage-none"]["heldGpuHours"] == 0


def test_held_against_used_gpu_hours(plane, prometheus, usage_tenants):
    result = usage(plane, prometheus, "--window", f"{SCRAPED_SECONDS}s", "--step", "1", "--json")
    report = {entry["tenant"]: entry for entry in json.loads(result.stdout)}
    window_hours = SCRAPED_SECONDS / 3600
    for tenant, (_, _, sm_active, _) in GPUS.items():
        held, used = report[tenant]["heldGpuHours"], report[tenant]["usedGpuHours"]
        assert report[tenant]["gpus"] == 1
        assert 0.7 * window_hours <= held <= 1.05 * window_hours, (tenant, held)
        assert used == pytest.approx(sm_active * held, rel=0.01, abs=1e-9), (tenant, used, held)


def test_the_table_names_each_tenants_gpus_and_an_unreachable_prometheus_is_a_clear_error(plane, prometheus,
                                                                                             usage_tenants):
    table = usage(plane, prometheus, "--window", f"{SCRAPED_SECONDS}s", "--step", "1").stdout.splitlines()
    assert table[0].split() == ["TENANT", "NAMESPACE", "GPUS", "HELD-GPU-H", "USED-GPU-H", "USE", "IDLE",
                                "BUSY-NOT-WORKING"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["usage-idle"][-2:] == ["notebook-0/GPU-idle", "-"]
    assert rows["usage-spin"][-2:] == ["-", "trainer-0/GPU-spin"]
    assert rows["usage-work"][5] == "100%"
    unreachable = subprocess.run([str(GPUTENANT), "usage", "--kubeconfig", str(plane.kubeconfig_path),
                                  "--prometheus-url", f"http://127.0.0.1:{free_ports(1)[0]}"],
                                 capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1
    assert "cannot query Prometheus at http://127.0.0.1:" in unreachable.stderr and "--prometheus-url" in unreachable.stderr


@pytest.fixture(scope="module")
def serving_pod(plane, usage_tenants):
    """usage-serve's GPU pod at KAI's ``inference`` priority (125: non-preemptible). No operator runs
    in this module, so the test makes the host namespace; the pod stays Pending (no GPU node), which
    still holds sleep back: only finished pods do not."""
    namespace = "tenant-usage-serve"
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "usage-inference"},
         "value": 125},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "serve-0", "namespace": namespace},
         "spec": {"priorityClassName": "usage-inference", "containers": [{"name": "serve", "image": "serve:1"}]}},
    ]))
    yield
    plane.kubectl("delete", "namespace", namespace, "--wait=false")
    plane.kubectl("delete", "priorityclass", "usage-inference")


def usage_round(plane, prometheus, now: datetime) -> Published:
    """What the operator's usage loop does each period: read usage, publish it, apply the idle policy."""
    config = OperatorConfig(operator_namespace="gpu-ops")

    async def once() -> Published:
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "usage-test") as client:
            tenants = await client.list(API_VERSION, KIND)
            queries = UsageQueries.over(f"{SCRAPED_SECONDS}s", f"{config.namespace_prefix}.+", step_seconds=1)
            usage = read_usage(prometheus.url, tenant_namespaces(tenants, config), queries)
            return await publish_usage(client, tenants, usage, f"{SCRAPED_SECONDS}s", now)
    return asyncio.run(once())


def tenant_body(plane, name: str) -> dict:
    return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)


def test_usage_in_status_written_once_and_an_idle_tenant_put_to_sleep_unless_non_preemptible(
        plane, prometheus, usage_tenants, serving_pod):
    now = datetime.now(UTC).replace(microsecond=0)
    first = usage_round(plane, prometheus, now)
    assert sorted(first.written) == sorted(usage_tenants) and first.slept == []
    idle = tenant_body(plane, "usage-idle")["status"]["usage"]
    assert (idle["gpusHeld"], idle["idleGpuCount"], idle["idleGpus"], idle["busyNotWorking"]) == \
        (1, 1, [{"pod": "notebook-0", "gpu": "GPU-idle"}], False)
    assert idle["allIdleSince"] == idle["observedAt"] == rfc3339(now) and idle["window"] == f"{SCRAPED_SECONDS}s"
    spinning = tenant_body(plane, "usage-spin")["status"]["usage"]
    assert (spinning["busyNotWorking"], spinning["idleGpuCount"], "allIdleSince" in spinning) == (True, 0, False)
    working = tenant_body(plane, "usage-work")["status"]["usage"]
    assert (working["busyNotWorking"], working["idleGpuCount"], working["gpuHoursUsed"] > 0) == (False, 0, True)
    assert tenant_body(plane, "usage-none")["status"]["usage"]["gpusHeld"] == 0

    again = usage_round(plane, prometheus, now + timedelta(minutes=1))
    assert again.written == [] and again.slept == [], "nothing new to say: no status write"

    later = usage_round(plane, prometheus, now + IDLE_AFTER)
    assert later.slept == ["usage-idle"]
    slept = tenant_body(plane, "usage-idle")
    assert slept["spec"]["sleep"]["asleep"] is True
    assert slept["metadata"]["annotations"]["gputenant.io/slept-idle-at"] == rfc3339(now + IDLE_AFTER)
    assert tenant_body(plane, "usage-serve")["spec"]["sleep"]["asleep"] is False, "a non-preemptible pod runs there"
    assert tenant_body(plane, "usage-spin")["spec"]["sleep"]["asleep"] is False, "its GPU is busy (not working)"
    events = json.loads(plane.kubectl("get", "events", "-A", "--field-selector",
                                      "involvedObject.name=usage-idle,reason=IdleGpus", "-o", "json").stdout)
    assert [event["type"] for event in events["items"]] == ["Normal"]
    assert "idle since " + rfc3339(now) in events["items"][0]["message"]
