"""`gputenant usage` against a real Prometheus (Debian's package, kubeplane/prometheus.py) scraping
the simulated dcgm-exporter (kubeplane/dcgm_exporter.py: GPU hardware is the one thing simulated),
and GpuTenants on the real control plane. The "spinning" GPU reproduces what was measured on an
H100: one block on 1 of 132 SMs reads GPU_UTIL 100% while SM activity is 0.8%.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

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
}


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
                  "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "u"}], "gpu": {"quota": 1}}}
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
