"""The operator's Prometheus metrics through a real Prometheus (Debian's package,
kubeplane/prometheus.py) scraping `gputenant run` on loopback every second, during a tenant
lifecycle: create, a spec change, a tenant whose Helm release fails, deletion. Every assertion is a
PromQL query against Prometheus' HTTP API, as a dashboard or an alert would ask."""

from __future__ import annotations

import os

import pytest

from gputenant.metrics import PREPARE_STEP, step_label
from gputenant.reconcile.steps import STEPS
from kubeplane import wait_for
from kubeplane.process import free_ports
from kubeplane.prometheus import Prometheus

METRICS_ADDRESS_ENV = "GPUTENANT_METRICS_ADDRESS"
TENANT, FAILING = "metrics-t", "metrics-broken-t"
DEFAULT_TOKEN_LIFETIME_SECONDS = 24 * 3600


@pytest.fixture(scope="module")
def metrics_address():
    """Where this module's operator serves its metrics, given through the environment variable (the
    conftest's operator passes its own environment on), so the flag's default path is used too."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    os.environ[METRICS_ADDRESS_ENV] = address
    yield address
    os.environ.pop(METRICS_ADDRESS_ENV, None)


@pytest.fixture(scope="module")
def operator(metrics_address, operator):
    """The conftest's operator, started while the metrics address is in the environment; later
    modules' operators do not get it."""
    os.environ.pop(METRICS_ADDRESS_ENV, None)
    return operator


@pytest.fixture(scope="module")
def prometheus(operator, metrics_address, tmp_path_factory):
    with Prometheus(tmp_path_factory.mktemp("prometheus"), targets=[metrics_address]) as server:
        try:
            server.wait_for_target_up()
        except TimeoutError:
            raise AssertionError(f"prometheus never scraped {metrics_address}: {server.api('targets')}\n"
                                 f"operator log:\n{operator.log_tail()}") from None
        yield server


def eventually(prometheus: Prometheus, promql: str, accept, timeout: float = 30) -> float | None:
    """The value of `promql` once `accept(value)` holds (Prometheus scrapes every second, the
    operator refreshes pools every resync period)."""
    def probe():
        value = prometheus.value(promql)
        return (value,) if accept(value) else None
    try:
        return wait_for(probe, timeout=timeout, interval=0.5, what=promql)[0]
    except TimeoutError:
        raise AssertionError(f"{promql} = {prometheus.value(promql)} after {timeout}s") from None


def at_least(minimum: float):
    return lambda value: value is not None and value >= minimum


@pytest.fixture(scope="module")
def ready_tenant(tenants_api, prometheus):
    tenants_api.apply(tenants_api.manifest(TENANT, "Trusted", owner="m-owner"))
    return tenants_api.wait_ready(TENANT)


def test_a_ready_tenant_shows_in_the_tenant_reconcile_helm_and_kubeconfig_families(prometheus, ready_tenant):
    assert eventually(prometheus, f'gputenant_tenant_ready{{tenant="{TENANT}"}}', lambda v: v == 1) == 1
    assert eventually(prometheus, 'sum(gputenant_tenants{phase="Ready"})', at_least(1)) >= 1
    ready_reason = next(c["reason"] for c in ready_tenant["status"]["conditions"] if c["type"] == "Ready")
    assert prometheus.query(f'gputenant_tenants{{phase="Ready", reason="{ready_reason}"}}')
    for step in [PREPARE_STEP, *(step_label(s.condition) for s in STEPS)]:
        assert prometheus.value(f'gputenant_reconcile_step_duration_seconds_count{{step="{step}"}}') >= 1, step
    assert prometheus.value('gputenant_reconcile_duration_seconds_count{result="ready"}') >= 1
    p95 = prometheus.value('histogram_quantile(0.95, sum by (le) (gputenant_reconcile_step_duration_seconds_bucket'
                           '{step="vcluster"}))')
    assert 0 < p95 < 120
    assert prometheus.value('gputenant_helm_operations_total{operation="install", outcome="success"}') >= 1
    assert prometheus.value('gputenant_helm_operation_duration_seconds_count{operation="install"}') >= 1
    expires_in = prometheus.value(f'gputenant_kubeconfig_expires_in_seconds{{tenant="{TENANT}"}}')
    assert 0.5 * DEFAULT_TOKEN_LIFETIME_SECONDS < expires_in <= DEFAULT_TOKEN_LIFETIME_SECONDS
    assert prometheus.value("process_resident_memory_bytes") > 0


def test_pools_report_capacity_and_what_the_tenant_was_granted(prometheus, ready_tenant):
    pool = ready_tenant["status"]["sharing"]["pool"]
    assert prometheus.value(f'gputenant_pool_gpus{{pool="{pool}"}}') == 8  # examples/config.yaml
    assert eventually(prometheus, f'gputenant_pool_granted_gpus{{pool="{pool}"}}', at_least(1)) >= 1
    assert prometheus.value(f'gputenant_pool_burst_gpus{{pool="{pool}"}}') >= 1
    ratio = prometheus.value(f'gputenant_pool_overcommit_ratio{{pool="{pool}"}}')
    assert ratio == pytest.approx(prometheus.value(f'gputenant_pool_granted_gpus{{pool="{pool}"}}') / 8)
    assert {series["metric"]["pool"] for series in prometheus.query("gputenant_pool_nodes")} >= {pool}


def test_a_value_change_is_an_upgrade_and_resyncs_skip_helm(prometheus, tenants_api, ready_tenant):
    tenants_api.apply(tenants_api.manifest(TENANT, "Trusted", owner="m-owner",
                                           vcluster={"values": {"coreDNSReplicas": 2}}))
    wait_for(lambda: (tenants_api.get(TENANT) or {}).get("status", {}).get("observedGeneration") == 2,
             timeout=60, interval=0.5, what=f"{TENANT} at generation 2")
    tenants_api.wait_ready(TENANT)
    eventually(prometheus, 'gputenant_helm_operations_total{operation="upgrade", outcome="success"}', at_least(1))
    skipped = eventually(prometheus, 'gputenant_helm_operations_total{operation="skip"}', at_least(1))
    eventually(prometheus, 'gputenant_helm_operations_total{operation="skip"}', at_least(skipped + 1),
               timeout=4 * tenants_api.operator.resync_seconds)


def test_a_failing_helm_release_is_a_not_ready_tenant_a_step_error_and_a_helm_failure(prometheus, tenants_api):
    tenants_api.apply(tenants_api.manifest(FAILING, "Trusted", owner="m-owner", vcluster={"chartVersion": "0.35.0"}))
    assert eventually(prometheus, f'gputenant_tenant_ready{{tenant="{FAILING}"}}', lambda v: v == 0) == 0
    assert eventually(prometheus, 'sum(gputenant_reconcile_errors_total{step="vcluster"})', at_least(1)) >= 1
    [failure] = prometheus.query('gputenant_helm_operations_total{operation="install", outcome!="success"}')
    assert failure["metric"]["outcome"] == "ChartVersionMismatch"
    [not_ready] = prometheus.query('gputenant_tenants{phase="NotReady"}')
    assert not_ready["metric"]["reason"] and float(not_ready["value"][1]) == 1


def test_deleting_tenants_removes_their_series_and_uninstalls(prometheus, tenants_api):
    tenants_api.delete_all()
    for tenant in (TENANT, FAILING):
        eventually(prometheus, f'count(gputenant_tenant_ready{{tenant="{tenant}"}})', lambda v: v is None)
        assert prometheus.value(f'gputenant_kubeconfig_expires_in_seconds{{tenant="{tenant}"}}') is None
    assert prometheus.value('sum(gputenant_tenants{phase="Ready"})') is None
    assert prometheus.value('gputenant_helm_operations_total{operation="uninstall", outcome="success"}') >= 1
    eventually(prometheus, "sum(gputenant_pool_granted_gpus)", lambda v: v == 0)


def test_the_guard_decisions_of_the_lifecycle_are_counted_with_their_latency(prometheus):
    # Decisions reach the operator's registry from the guard's own process through a queue.
    assert eventually(prometheus, 'sum(gputenant_guard_decision_duration_seconds_count{outcome="allowed"})',
                      at_least(1)) >= 1
    p99 = prometheus.value("histogram_quantile(0.99, sum by (le) (gputenant_guard_decision_duration_seconds_bucket))")
    assert 0 < p99 < 1
