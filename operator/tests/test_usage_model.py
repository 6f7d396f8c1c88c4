"""Allocation against use, judged from DCGM series already read (pure): idle GPUs, "busy but not
working" from SM activity and never from GPU_UTIL alone, and the queries' shape. (A real Prometheus
and `gputenant usage` are in e2e/tests/test_usage.py.)"""

from __future__ import annotations

import pytest

from gputenant.usage import GpuSample, UsageQueries, format_usage_table, judge_usage
from gputenant.usage.model import is_busy_but_not_working, is_idle

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
