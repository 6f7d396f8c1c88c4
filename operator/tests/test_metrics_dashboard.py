"""The chart's Grafana dashboard: it loads, has the fields Grafana needs, and every PromQL expression
names only series the operator exports (a renamed metric breaks this test, not a platform team's
dashboard)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry

from gputenant.metrics import OperatorMetrics, PoolFigures, TenantFigures, UnheldMemoryFigures, UsageFigures

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "gpu-tenant-operator" / "dashboards" / "gputenant.json"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}
"""Keywords of PromQL that look like names."""


def exported_series() -> set[str]:
    """Every sample name the operator exports, with one observation of each family."""
    metrics = OperatorMetrics(CollectorRegistry())
    now = datetime.now(UTC)
    metrics.pass_finished("a", "ready", 0.1, TenantFigures("Ready", "AllPartsReady", now + timedelta(hours=1)))
    with metrics.timing_step("namespace"):
        metrics.step_failed("namespace", "ApiUnavailable")
    metrics.helm_operation("install", "success", 1.0)
    metrics.observe_guard_decision("none", "allowed", 0.001)
    metrics.publish_pools([PoolFigures("p", "MIG", 1, 8, 2, 2, 0.25)])
    metrics.publish_usage([UsageFigures("a", 2, 2.0, 0.5, 1, 1)])
    metrics.watch_guard(lambda: True)
    metrics.publish_shares([("a", "p", 0.25)])
    metrics.publish_prices("EUR", {"p": 2.0})
    metrics.publish_isolation([("p", "True", "Attested")])
    metrics.publish_unheld_memory([UnheldMemoryFigures("gpu-1", "GPU-a", "", 2048.0)])
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names, label values, durations or Grafana variables."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    stripped = re.sub(r"\$\{?\w+\}?", "", stripped)
    stripped = re.sub(r"\{[^}]*\}", "", stripped)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(r"\b\d[\w.]*", "", stripped)
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", stripped)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?!\s*\()\b", stripped))
    functions = set(re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\(", stripped))
    return {name for name in names - functions if name.lower() not in PROMQL_WORDS}


def panels() -> list[dict]:
    return [panel for panel in json.loads(DASHBOARD.read_text())["panels"] if panel["type"] != "row"]


def test_dashboard_loads_with_the_fields_grafana_needs():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    [variable] = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["title"] and panel["type"] in {"timeseries", "table", "stat", "bargauge"}, panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(target["expr"] and target["refId"] for target in panel["targets"])


def test_every_query_names_only_series_the_operator_exports():
    exported = exported_series()
    for panel in panels():
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']!r}"
            assert names <= exported, f"{panel['title']}: {sorted(names - exported)} are not exported"


def test_the_views_a_platform_team_asked_for_are_there():
    queried = {name for panel in panels() for target in panel["targets"] for name in metric_names(target["expr"])}
    assert {"gputenant_tenants", "gputenant_reconcile_step_duration_seconds_bucket", "gputenant_helm_operations_total",
            "gputenant_guard_decision_duration_seconds_count", "gputenant_guard_decision_duration_seconds_bucket",
            "gputenant_pool_gpus", "gputenant_pool_granted_gpus", "gputenant_kubeconfig_expires_in_seconds",
            "gputenant_tenant_held_gpu_hours", "gputenant_tenant_used_gpu_hours", "gputenant_tenant_idle_gpus",
            "gputenant_tenant_busy_not_working_gpus", "gputenant_tenant_gpu_shares",
            "gputenant_pool_price_per_gpu_hour", "gputenant_gpu_memory_held_by_no_one_mib", "gputenant_guard_up",
            "gputenant_pool_isolation_verified"} <= queried


def test_metric_names_reads_promql_as_intended():
    expr = ('histogram_quantile(0.95, sum by (step, le) (rate(gputenant_reconcile_step_duration_seconds_bucket'
            '{step!="prepare"}[$__rate_interval]))) / on (step) group_left bottomk(10, other_total offset 5m)')
    assert metric_names(expr) == {"gputenant_reconcile_step_duration_seconds_bucket", "other_total"}
    assert metric_names("gputenant_tenant_ready == 0") == {"gputenant_tenant_ready"}
