"""`gputenant run --prometheus-url`: the operator reads the (simulated) dcgm-exporter's series from
a real Prometheus, joins them to its tenant by host namespace and publishes allocation against use
as metrics, which the same Prometheus scrapes back from the operator."""

from __future__ import annotations

import os

import pytest

from kubeplane import wait_for
from kubeplane.dcgm_exporter import DcgmExporter, SimulatedGpu
from kubeplane.process import free_ports
from kubeplane.prometheus import Prometheus

TENANT = "usage-op-t"
NAMESPACE = f"tenant-{TENANT}"
ENVIRONMENT = ("GPUTENANT_PROMETHEUS_URL", "GPUTENANT_METRICS_ADDRESS")


@pytest.fixture(scope="module")
def exporter():
    with DcgmExporter([SimulatedGpu(NAMESPACE, "notebook-0", "GPU-idle", sm_active=0.0, gpu_util=0.0),
                       SimulatedGpu(NAMESPACE, "spin-0", "GPU-spin", sm_active=0.008, gpu_util=100.0),
                       SimulatedGpu(NAMESPACE, "train-0", "GPU-work", sm_active=0.95, gpu_util=100.0)]) as running:
        yield running


@pytest.fixture(scope="module")
def metrics_address():
    return f"127.0.0.1:{free_ports(1)[0]}"


@pytest.fixture(scope="module")
def prometheus(exporter, metrics_address, tmp_path_factory):
    with Prometheus(tmp_path_factory.mktemp("prometheus-usage-op"),
                    targets=[exporter.address, metrics_address]) as server:
        server.wait_for_target_up([exporter.address])
        yield server


@pytest.fixture(scope="module")
def operator_environment(prometheus, metrics_address):
    os.environ.update(dict(zip(ENVIRONMENT, (prometheus.url, metrics_address), strict=True)))
    yield
    for name in ENVIRONMENT:
        os.environ.pop(name, None)


@pytest.fixture(scope="module")
def operator(operator_environment, operator):
    """The conftest's operator, started with this module's Prometheus and metrics address."""
    for name in ENVIRONMENT:
        os.environ.pop(name, None)
    return operator


def test_the_operator_publishes_idle_and_busy_but_not_working_gpus_per_tenant(prometheus, tenants_api, metrics_address):
    tenants_api.apply(tenants_api.manifest(TENANT, "Trusted", owner="u-owner"))
    prometheus.wait_for_target_up([metrics_address])

    def published():
        held = prometheus.value(f'gputenant_tenant_held_gpu_hours{{tenant="{TENANT}"}}')
        return prometheus.value(f'gputenant_tenant_gpus{{tenant="{TENANT}"}}') == 3 and held and held > 0
    try:  # the GPU-hour sums of the default 1h window step every 30 s
        wait_for(published, timeout=90, interval=1, what=f"usage of {TENANT} in the operator's metrics")
    except TimeoutError:
        raise AssertionError(f"no usage published; operator log:\n{tenants_api.operator.log_tail()}") from None
    assert prometheus.value(f'gputenant_tenant_idle_gpus{{tenant="{TENANT}"}}') == 1
    assert prometheus.value("gputenant_guard_up") == 1, "the conftest's operator serves the guard"
    assert prometheus.value(f'gputenant_tenant_busy_not_working_gpus{{tenant="{TENANT}"}}') == 1
    held = prometheus.value(f'gputenant_tenant_held_gpu_hours{{tenant="{TENANT}"}}')
    used = prometheus.value(f'gputenant_tenant_used_gpu_hours{{tenant="{TENANT}"}}')
    assert held > 0 and used == pytest.approx(held * (0.0 + 0.008 + 0.95) / 3, rel=0.05)

    status = wait_for(lambda: ((tenants_api.get(TENANT) or {}).get("status") or {}).get("usage"), timeout=90,
                      interval=1, what=f"status.usage of {TENANT}")
    assert (status["gpusHeld"], status["idleGpuCount"], status["idleGpus"], status["busyNotWorking"]) == (
        3, 1, [{"pod": "notebook-0", "gpu": "GPU-idle"}], True)
    assert "allIdleSince" not in status
