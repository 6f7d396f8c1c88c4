"""The operator's metric families on a fresh registry each: what each observation publishes, the
tenant and pool series built at scrape time, and the `--metrics-address` flag. (A real Prometheus
scrapes `gputenant run` during a tenant lifecycle in e2e/tests/test_metrics.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from gputenant.cli import main
from gputenant.config.settings import parse_metrics_address
from gputenant.metrics import OperatorMetrics, PoolFigures, TenantFigures, pool_exposition, step_label

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def fresh() -> OperatorMetrics:
    return OperatorMetrics(CollectorRegistry(), clock=lambda: NOW)


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_tenants_are_counted_by_phase_and_reason_and_leave_when_forgotten():
    metrics = fresh()
    metrics.pass_finished("a", "ready", 0.2, TenantFigures("Ready", "AllPartsReady"))
    metrics.pass_finished("b", "ready", 0.3, TenantFigures("Ready", "AllPartsReady"))
    metrics.pass_finished("c", "retrying", 0.1, TenantFigures("NotReady", "HelmUnavailable"))
    assert sample(metrics, "gputenant_tenants", phase="Ready", reason="AllPartsReady") == 2
    assert sample(metrics, "gputenant_tenants", phase="NotReady", reason="HelmUnavailable") == 1
    assert sample(metrics, "gputenant_tenant_ready", tenant="c", reason="HelmUnavailable") == 0
    metrics.pass_finished("c", "ready", 0.1, TenantFigures("Ready", "AllPartsReady"))
    assert sample(metrics, "gputenant_tenants", phase="NotReady", reason="HelmUnavailable") is None
    assert sample(metrics, "gputenant_tenants", phase="Ready", reason="AllPartsReady") == 3
    metrics.forget_tenant("a")
    assert sample(metrics, "gputenant_tenants", phase="Ready", reason="AllPartsReady") == 2
    assert sample(metrics, "gputenant_tenant_ready", tenant="a", reason="AllPartsReady") is None
    assert sample(metrics, "gputenant_reconcile_duration_seconds_count", result="ready") == 3
    assert sample(metrics, "gputenant_reconcile_duration_seconds_count", result="retrying") == 1


def test_kubeconfig_expiry_is_the_time_left_at_scrape_time():
    moments = [NOW]
    metrics = OperatorMetrics(CollectorRegistry(), clock=lambda: moments[-1])
    metrics.pass_finished("a", "ready", 0.1, TenantFigures("Ready", "AllPartsReady", NOW + timedelta(hours=2)))
    metrics.pass_finished("b", "not_ready", 0.1, TenantFigures("Unknown", "Converging"))
    assert sample(metrics, "gputenant_kubeconfig_expires_in_seconds", tenant="a") == 7200
    moments.append(NOW + timedelta(hours=3))
    assert sample(metrics, "gputenant_kubeconfig_expires_in_seconds", tenant="a") == -3600
    assert sample(metrics, "gputenant_kubeconfig_expires_in_seconds", tenant="b") is None


def test_a_step_is_timed_when_it_raises_and_errors_are_counted_by_step_and_reason():
    metrics = fresh()
    with pytest.raises(RuntimeError), metrics.timing_step("vcluster"):
        raise RuntimeError("helm away")
    with metrics.timing_step("vcluster"):
        pass
    metrics.step_failed("vcluster", "HelmUnavailable")
    assert sample(metrics, "gputenant_reconcile_step_duration_seconds_count", step="vcluster") == 2
    assert sample(metrics, "gputenant_reconcile_errors_total", step="vcluster", reason="HelmUnavailable") == 1
    assert [step_label(t) for t in ("NamespaceReady", "VClusterReady", "KubeconfigReady", "ArgoCDReady")] == [
        "namespace", "vcluster", "kubeconfig", "argocd"]


def test_helm_skips_are_counted_but_not_timed():
    metrics = fresh()
    metrics.helm_operation("install", "success", 2.0)
    metrics.helm_operation("upgrade", "HelmUnavailable", 0.5)
    metrics.helm_operation("skip", "success")
    assert sample(metrics, "gputenant_helm_operations_total", operation="install", outcome="success") == 1
    assert sample(metrics, "gputenant_helm_operations_total", operation="upgrade", outcome="HelmUnavailable") == 1
    assert sample(metrics, "gputenant_helm_operations_total", operation="skip", outcome="success") == 1
    assert sample(metrics, "gputenant_helm_operation_duration_seconds_sum", operation="install") == 2.0
    assert sample(metrics, "gputenant_helm_operation_duration_seconds_count", operation="skip") is None


def test_guard_decisions_by_rule_and_outcome_with_latency_buckets():
    metrics = fresh()
    metrics.observe_guard_decision("none", "allowed", 0.002)
    metrics.observe_guard_decision("queue-label", "refused", 0.0004)
    assert sample(metrics, "gputenant_guard_decision_duration_seconds_count", rule="queue-label", outcome="refused") == 1
    assert sample(metrics, "gputenant_guard_decision_duration_seconds_bucket", rule="queue-label", outcome="refused",
                  le="0.0005") == 1
    assert sample(metrics, "gputenant_guard_decision_duration_seconds_bucket", rule="none", outcome="allowed",
                  le="0.001") == 0


def test_pools_are_replaced_on_each_publish_and_a_pool_without_gpus_has_no_ratio():
    metrics = fresh()
    metrics.publish_pools([PoolFigures("ts", "TimeSlicing", 2, 8, 10, 12, 1.25),
                           PoolFigures("empty", "MIG", 0, 0, 0, 0, None)])
    assert sample(metrics, "gputenant_pool_overcommit_ratio", pool="ts", mode="TimeSlicing") == 1.25
    assert sample(metrics, "gputenant_pool_gpus", pool="empty", mode="MIG") == 0
    assert sample(metrics, "gputenant_pool_overcommit_ratio", pool="empty", mode="MIG") is None
    metrics.publish_pools([PoolFigures("ts", "TimeSlicing", 2, 8, 4, 4, 0.5)])
    assert sample(metrics, "gputenant_pool_gpus", pool="empty", mode="MIG") is None
    assert sample(metrics, "gputenant_pool_granted_gpus", pool="ts", mode="TimeSlicing") == 4
    text = pool_exposition([PoolFigures("ts", "TimeSlicing", 2, 8, 4, 4, 0.5)])
    assert 'gputenant_pool_burst_gpus{mode="TimeSlicing",pool="ts"} 4.0' in text.splitlines()
    assert "gputenant_tenants" not in text


def test_two_registries_do_not_share_series():
    first, second = fresh(), fresh()
    first.helm_operation("install", "success", 1.0)
    assert sample(second, "gputenant_helm_operations_total", operation="install", outcome="success") is None


@pytest.mark.parametrize(("address", "parsed"), [
    ("0.0.0.0:8081", ("0.0.0.0", 8081)), ("127.0.0.1:9100", ("127.0.0.1", 9100)), ("[::]:8081", ("::", 8081)),
])
def test_metrics_address_parses(address, parsed):
    assert parse_metrics_address(address) == parsed


@pytest.mark.parametrize("address", ["8081", ":8081", "host:", "host:http", "host:70000", "host:0"])
def test_a_bad_metrics_address_is_refused_naming_the_flag(address, capsys):
    assert main(["run", "--metrics-address", address]) == 2
    assert f"--metrics-address {address!r} (or $GPUTENANT_METRICS_ADDRESS) is not HOST:PORT" in capsys.readouterr().err


def test_usage_per_tenant_is_replaced_on_each_publish():
    from gputenant.metrics import UsageFigures

    metrics = fresh()
    metrics.publish_usage([UsageFigures("a", 2, 2.0, 0.5, 1, 0), UsageFigures("b", 1, 1.0, 0.01, 0, 1)])
    assert sample(metrics, "gputenant_tenant_held_gpu_hours", tenant="a") == 2.0
    assert sample(metrics, "gputenant_tenant_used_gpu_hours", tenant="a") == 0.5
    assert sample(metrics, "gputenant_tenant_idle_gpus", tenant="a") == 1
    assert sample(metrics, "gputenant_tenant_busy_not_working_gpus", tenant="b") == 1
    metrics.publish_usage([UsageFigures("a", 2, 2.0, 0.5, 1, 0)])
    assert sample(metrics, "gputenant_tenant_gpus", tenant="b") is None


def test_guard_isolation_memory_held_by_no_one_shares_and_prices_follow_what_was_published():
    from gputenant.metrics import UnheldMemoryFigures

    metrics = fresh()
    assert sample(metrics, "gputenant_guard_up") is None, "no guard served: no series"
    alive = [True]
    metrics.watch_guard(lambda: alive[-1])
    assert sample(metrics, "gputenant_guard_up") == 1
    alive.append(False)
    assert sample(metrics, "gputenant_guard_up") == 0, "read at scrape time"
    metrics.publish_isolation([("mig", "True", "Attested"), ("hami", "Unknown", "Unattested")])
    assert sample(metrics, "gputenant_pool_isolation_verified", pool="mig", reason="Attested") == 1
    assert sample(metrics, "gputenant_pool_isolation_verified", pool="hami", reason="Unattested") == 0
    metrics.publish_unheld_memory([UnheldMemoryFigures("gpu-1", "GPU-a", "", 8000.0)])
    assert sample(metrics, "gputenant_gpu_memory_held_by_no_one_mib", node="gpu-1", gpu="GPU-a", mig_instance="") == 8000
    metrics.publish_unheld_memory([])
    assert sample(metrics, "gputenant_gpu_memory_held_by_no_one_mib", node="gpu-1", gpu="GPU-a", mig_instance="") is None
    metrics.publish_shares([("a", "l4-hami", 0.25)])
    metrics.publish_prices("EUR", {"l4-hami": 0.8})
    assert sample(metrics, "gputenant_tenant_gpu_shares", tenant="a", pool="l4-hami") == 0.25
    assert sample(metrics, "gputenant_pool_price_per_gpu_hour", pool="l4-hami", currency="EUR") == 0.8
