"""The pool report's leak detector: GPUs KAI's reservations hold that no live tenant share explains."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputenant.pools.leaks import SETTLING, add_leak_problems, unexplained_reservations
from gputenant.pools.report import PoolReport, format_table
from gputenant.timefmt import rfc3339

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
OLD = rfc3339(NOW - SETTLING - timedelta(seconds=1))
TENANTS = ["tenant-a", "tenant-b"]


def reservation(name: str, node: str = "gpu-1", group: str = "g1", created: str = OLD) -> dict:
    return {"metadata": {"name": name, "namespace": "kai-resource-reservation", "creationTimestamp": created,
                         "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group}},
            "spec": {"nodeName": node, "containers": [{"name": "r", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def share(namespace: str = "tenant-a", node: str | None = "gpu-1", labels: dict | None = None,
          phase: str = "Running", fraction: bool = True) -> dict:
    return {"metadata": {"name": "job", "namespace": namespace,
                         "labels": {"runai-gpu-group": "g1"} if labels is None else labels,
                         "annotations": {"gpu-fraction": "0.5"} if fraction else {}},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def held(pods: list[dict], reservations: list[dict] | None = None) -> list[str]:
    return [h.pod for h in unexplained_reservations(reservations or [reservation("r1")], pods, TENANTS, NOW)]


def test_a_reservation_with_a_live_share_on_its_gpu_is_explained():
    assert held([share()]) == []
    assert held([share(labels={"runai-gpu-group/g1": "g1"})]) == [], "a multi-GPU share"
    assert held([share(namespace="tenant-b")]) == [], "a share of any tenant"


def test_a_reservation_kept_alive_by_no_live_share_is_named():
    assert held([]) == ["r1"]
    assert held([share(node=None, labels={"runai-gpu-group/g1": "g1"})]) == ["r1"], "a pending pod with the label"
    assert held([share(phase="Succeeded")]) == ["r1"], "a finished share"
    assert held([share(namespace="kube-system")]) == ["r1"], "not a tenant's pod"
    assert held([share(fraction=False)]) == ["r1"], "no share: the label alone"
    assert held([share(node="gpu-2")]) == ["r1"], "the group on another node's GPU"
    assert held([share(labels={"runai-gpu-group": "g2"})]) == ["r1"], "another GPU's group"


def test_a_new_reservation_is_not_judged_yet():
    young = reservation("r2", created=rfc3339(NOW - SETTLING + timedelta(seconds=5)))
    assert held([], [young]) == []


def test_the_report_names_the_problem_on_the_pool_of_the_node():
    reports = [PoolReport(name="hami", mode="HAMi", nodes=["gpu-1"], node_gpus=8, configured_gpus=None,
                          granted=1, burst=2), PoolReport(name="ts", mode="TimeSlicing", nodes=["gpu-2"],
                                                          node_gpus=8, configured_gpus=None, granted=0, burst=0)]
    leaks = unexplained_reservations([reservation("r1"), reservation("r3", group="g3")], [share()], TENANTS, NOW)
    add_leak_problems(reports, leaks, "kai-resource-reservation")
    assert reports[1].problems == []
    [problem] = reports[0].problems
    assert problem.startswith("UnexplainedReservation: 1 GPU(s) held by KAI reservation pods")
    assert "r3 on gpu-1 (group g3)" in problem and "r1 " not in problem
    assert "PROBLEM hami: UnexplainedReservation" in format_table(reports)
