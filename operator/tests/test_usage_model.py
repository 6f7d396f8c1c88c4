"""Allocation against use, judged from DCGM series already read (pure): idle GPUs, "busy but not
working" from SM activity and never from GPU_UTIL alone, and the queries' shape. (A real Prometheus
and `gputenant usage` are in e2e/tests/test_usage.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gputenant.api.status import MAX_LISTED_GPUS
from gputenant.timefmt import rfc3339
from gputenant.usage import GpuSample, TenantUsage, UsageQueries, format_usage_table, judge_usage
from gputenant.usage.model import is_busy_but_not_working, is_idle
from gputenant.usage.summary import REFRESH_FIGURES_AFTER, usage_status, worth_writing

NAMESPACES = {"a": "tenant-a", "b": "tenant-b"}


def gpu(namespace: str, sm_active: float, gpu_util: float | None, name: str = "GPU-1", pod: str = "p") -> GpuSample:
    return GpuSample(namespace=namespace, pod=pod, gpu=name, sm_active=sm_active, gpu_util=gpu_util)


def test_busy_comes_from_sm_activity_not_from_gpu_util():
    spinning = gpu("tenant-a", sm_active=0.008, gpu_util=100.0)  # one block on 1 of 132 SMs of an H100
    working = gpu("tenant-a", sm_active=0.999, gpu_util=100.0)
    idle = gpu("tenant-a", sm_active=0.0, gpu_util=0.0)
    assert is_busy_but_not_working(spinning) and not is_idle(spinning)
    assert not is_busy_but_not_working(working) and not is_idle(working)
    assert is_idle(idle) and not is_busy_but_not_working(idle)
    assert not is_busy_but_not_working(gpu("tenant-a", sm_active=0.05, gpu_util=None))


def test_series_join_tenants_by_host_namespace_and_others_are_ignored():
    samples = [gpu("tenant-a", 0.0, 0.0, "GPU-1", "nb"), gpu("tenant-a", 0.01, 97.0, "GPU-2", "spin"),
               gpu("tenant-a", 0.9, 100.0, "GPU-3", "train"), gpu("kube-system", 0.0, 0.0, "GPU-4")]
    usage = judge_usage(NAMESPACES, samples, {"tenant-a": 3.0, "kube-system": 1.0}, {"tenant-a": 0.9})
    assert [u.tenant for u in usage] == ["a", "b"]
    a, b = usage
    assert a.gpus_held == 3 and [s.gpu for s in a.idle] == ["GPU-1"] and [s.gpu for s in a.busy_not_working] == ["GPU-2"]
    assert (a.held_gpu_hours, a.used_gpu_hours, a.use_ratio) == (3.0, 0.9, 0.3)
    assert (b.gpus_held, b.held_gpu_hours, b.use_ratio) == (0, 0.0, None)
    table = format_usage_table(usage).splitlines()
    assert table[1].split() == ["a", "tenant-a", "3", "3.00", "0.90", "30%", "nb/GPU-1", "spin/GPU-2"]
    assert table[2].split() == ["b", "tenant-b", "0", "0.00", "0.00", "-", "-", "-"]


def test_queries_select_the_tenant_namespaces_and_sum_at_a_fixed_resolution():
    queries = UsageQueries(window="2h", step_seconds=30, namespace_regex="tenant-.+")
    assert queries.per_gpu("DCGM_FI_PROF_SM_ACTIVE") == (
        'max by (namespace, pod, UUID) (avg_over_time(DCGM_FI_PROF_SM_ACTIVE{namespace=~"tenant-.+"}[2h]))')
    assert "[2h:30s]" in queries.held_hours() and queries.held_hours().endswith("* 30 / 3600")
    assert "sum_over_time((max by (namespace, UUID)" in queries.used_hours()


def test_the_window_sets_the_default_resolution_and_a_bad_window_names_the_fix():
    assert UsageQueries.over("1h", "tenant-.+").step_seconds == 30
    assert UsageQueries.over("20s", "tenant-.+").step_seconds == 1
    assert UsageQueries.over("1h", "tenant-.+", step_seconds=5).step_seconds == 5
    for bad in ("1d", "0s", "soon"):
        with pytest.raises(ValueError, match="give e.g. 1h or 30m"):
            UsageQueries.over(bad, "tenant-.+")


# -- the summary in the tenant's status ---------------------------------------------------------

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def tenant_usage(idle: int, working: int = 0, spinning: int = 0, held_hours: float = 1.0) -> TenantUsage:
    samples = ([gpu("tenant-a", 0.0, 0.0, f"GPU-idle-{i}", f"nb-{i}") for i in range(idle)]
               + [gpu("tenant-a", 0.9, 100.0, f"GPU-work-{i}") for i in range(working)]
               + [gpu("tenant-a", 0.008, 100.0, f"GPU-spin-{i}") for i in range(spinning)])
    [usage] = judge_usage({"a": "tenant-a"}, samples, {"tenant-a": held_hours}, {"tenant-a": 0.123456})
    return usage


def test_status_summary_is_small_caps_the_idle_list_and_counts_all():
    summary = usage_status(tenant_usage(idle=MAX_LISTED_GPUS + 4), "1h", NOW, None)
    assert summary.idle_gpu_count == MAX_LISTED_GPUS + 4 and len(summary.idle_gpus) == MAX_LISTED_GPUS
    assert summary.idle_gpus[0].model_dump() == {"pod": "nb-0", "gpu": "GPU-idle-0"}
    assert (summary.gpu_hours_used, summary.busy_not_working) == (0.12, False)
    assert summary.all_idle_since == rfc3339(NOW)


def test_all_idle_since_carries_over_while_every_gpu_stays_idle_and_resets_when_one_works():
    first = usage_status(tenant_usage(idle=2), "1h", NOW - timedelta(hours=1), None)
    later = usage_status(tenant_usage(idle=2), "1h", NOW, first)
    assert later.all_idle_since == first.all_idle_since == rfc3339(NOW - timedelta(hours=1))
    assert usage_status(tenant_usage(idle=1, working=1), "1h", NOW, first).all_idle_since is None
    assert usage_status(tenant_usage(idle=0), "1h", NOW, first).all_idle_since is None, "holding no GPU is not idle"
    assert usage_status(tenant_usage(idle=1, spinning=1), "1h", NOW, first).busy_not_working is True


def test_status_is_rewritten_for_a_new_verdict_at_once_and_for_drifting_hours_only_after_a_while():
    written = usage_status(tenant_usage(idle=1, held_hours=0.5), "1h", NOW, None)
    assert worth_writing(None, written, NOW)
    same = usage_status(tenant_usage(idle=1, held_hours=0.5), "1h", NOW + timedelta(minutes=1), written)
    assert not worth_writing(written, same, NOW + timedelta(minutes=1))
    drifted = usage_status(tenant_usage(idle=1, held_hours=0.52), "1h", NOW + timedelta(minutes=1), written)
    assert not worth_writing(written, drifted, NOW + timedelta(minutes=1))
    assert worth_writing(written, drifted, NOW + REFRESH_FIGURES_AFTER)
    busy = usage_status(tenant_usage(idle=0, spinning=1, held_hours=0.5), "1h", NOW + timedelta(minutes=1), written)
    assert worth_writing(written, busy, NOW + timedelta(minutes=1))


def test_status_carries_the_windows_hours_by_share_and_their_cost_and_they_drift_like_the_hours():
    from gputenant.config.models import Accounting

    accounting = Accounting(currency="EUR", price_per_gpu_hour={"l4-hami": 0.8, "h100": 3.0})
    shared = tenant_usage(idle=0, held_hours=1.0)
    shared.share_hours = {"l4-hami": 0.25, "h100": 1.0}
    written = usage_status(shared, "1h", NOW, None, accounting)
    assert (written.gpu_hours_by_share, written.cost, written.cost_currency) == (1.25, 3.2, "EUR")
    assert usage_status(shared, "1h", NOW, None).cost is None, "no accounting: no cost"
    unshared = usage_status(tenant_usage(idle=0, held_hours=1.0), "1h", NOW, None, accounting)
    assert (unshared.gpu_hours_by_share, unshared.cost, unshared.cost_currency) == (None, None, None)
    shared.share_hours = {"l4-hami": 0.5, "h100": 1.0}
    drifted = usage_status(shared, "1h", NOW + timedelta(minutes=1), written, accounting)
    assert not worth_writing(written, drifted, NOW + timedelta(minutes=1))
    assert worth_writing(written, drifted, NOW + REFRESH_FIGURES_AFTER)
    appeared = usage_status(shared, "1h", NOW + timedelta(minutes=1),
                            usage_status(tenant_usage(idle=0, held_hours=1.0), "1h", NOW, None, accounting), accounting)
    assert worth_writing(unshared, appeared, NOW + timedelta(minutes=1)), "hours by share appearing are news"
