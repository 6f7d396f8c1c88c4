"""Pool configuration as data: device-plugin config documents, node labels, MIG hold-back, report."""

from __future__ import annotations

import pytest
import yaml

from gputenant.config.models import OperatorConfig
from gputenant.pools import (
    PoolConfigError,
    TenantGrant,
    device_plugin_config_data,
    format_metrics,
    format_table,
    plan_pools,
    pool_reports,
)
from gputenant.pools.plan import parent_queue_conflict
from gputenant.pools.report import grants_from_tenants

CONFIG = OperatorConfig.model_validate({"pools": [
    {"name": "ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 8,
     "nodeSelector": {"pool": "ts"}, "timeSlicing": {"replicas": 4}},
    {"name": "mig", "mode": "MIG", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
     "nodeSelector": {"pool": "mig"}, "mig": {"config": "all-1g.10gb", "profiles": ["1g.10gb"]}},
    {"name": "hami", "mode": "HAMi", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
     "nodeSelector": {"pool": "hami"}, "hami": {}},
    {"name": "whole", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81920, "nodeSelector": {}},
]})


def node(name: str, gpus: int = 8, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.count": str(gpus), **labels}}}


def test_device_plugin_config_is_the_upstream_v1_time_slicing_document():
    data = device_plugin_config_data(CONFIG)
    assert list(data) == ["ts"]
    assert yaml.safe_load(data["ts"]) == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def test_two_time_slicing_pools_sharing_a_config_name_are_refused_naming_the_field():
    config = OperatorConfig.model_validate({"pools": [
        {"name": name, "mode": "TimeSlicing", "gpuModel": "L4", "gpuMemoryMiB": 24576, "nodeSelector": {"p": name},
         "devicePluginConfig": "shared", "timeSlicing": {"replicas": 2}} for name in ("a", "b")]})
    with pytest.raises(PoolConfigError, match=r"pools\[b\]\.devicePluginConfig 'shared' is used by two pools"):
        device_plugin_config_data(config)


def test_labels_per_mechanism_and_nothing_for_unselected_nodes():
    nodes = [node("ts-1", pool="ts"), node("mig-1", pool="mig", **{"nvidia.com/mig.config": "all-disabled"}),
             node("hami-1", pool="hami"), node("cpu-1", gpus=0)]
    plan = plan_pools(CONFIG, nodes, {})
    assert {(p.node, tuple(p.labels.items()), p.changed) for p in plan.nodes} == {
        ("ts-1", (("nvidia.com/device-plugin.config", "ts"),), True),
        ("mig-1", (("nvidia.com/mig.config", "all-1g.10gb"),), True)}
    assert plan.blocked == []
    assert plan.problems == ["pool whole has no nodeSelector, so no node is labelled for it; set pools[].nodeSelector"]


def test_a_hami_pool_never_labels_its_nodes_for_hamis_device_plugin():
    """HAMi mode is KAI fractions on NVIDIA's device plugin: `gpu=on` would start HAMi's beside it."""
    plan = plan_pools(CONFIG, [node("hami-1", pool="hami")], {})
    assert plan.nodes == [] and plan.problems[:-1] == []


def test_a_hami_pool_node_labelled_for_hamis_device_plugin_is_reported_with_the_fix():
    plan = plan_pools(CONFIG, [node("hami-1", pool="hami", gpu="on"), node("ts-1", pool="ts", gpu="on")], {})
    assert plan.problems[0] == (
        "node hami-1 of pool hami carries gpu=on, the label HAMi's device plugin selects: it would run beside "
        "NVIDIA's (HAMi pools are KAI GPU fractions on NVIDIA's device plugin); remove the label "
        "(kubectl label node hami-1 gpu-)")
    assert not any("ts-1" in problem for problem in plan.problems)


def test_a_hami_pool_selecting_hamis_device_plugin_label_is_refused_naming_the_field():
    config = OperatorConfig.model_validate({"pools": [
        {"name": "h", "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 1, "nodeSelector": {"pool": "h", "gpu": "on"}}]})
    plan = plan_pools(config, [node("h-1", pool="h", gpu="on")], {})
    assert plan.problems == [
        "pool h selects nodes by gpu=on, the label HAMi's device plugin selects: it would run beside NVIDIA's (HAMi "
        "pools are KAI GPU fractions on NVIDIA's device plugin); remove gpu from pools[h].nodeSelector and the "
        "label from its nodes"]


def test_labelled_nodes_need_no_change():
    nodes = [node("ts-1", pool="ts", **{"nvidia.com/device-plugin.config": "ts"})]
    assert [p.changed for p in plan_pools(CONFIG, nodes, {}).nodes] == [False]


def test_mig_relabel_is_held_back_while_gpu_pods_are_bound():
    nodes = [node("mig-1", pool="mig", **{"nvidia.com/mig.config": "all-balanced"})]
    plan = plan_pools(CONFIG, nodes, {"mig-1": ["team-a/train"]})
    [blocked] = plan.blocked
    assert (blocked.current, blocked.wanted, blocked.reason) == ("all-balanced", "all-1g.10gb", "MigReconfigurationBlocked")
    assert blocked.message == ("pool mig wants nvidia.com/mig.config=all-1g.10gb but GPU pods are bound to node "
                               "mig-1 (team-a/train); drain the node to change its MIG layout")
    assert [(p.labels, p.changed) for p in plan.nodes] == [({"nvidia.com/mig.config": "all-balanced"}, False)]


def test_node_in_two_pools_is_reported_not_labelled_twice():
    config = OperatorConfig.model_validate({"pools": [
        {"name": name, "mode": "TimeSlicing", "gpuModel": "L4", "gpuMemoryMiB": 1, "nodeSelector": {"gpu-node": "yes"},
         "timeSlicing": {"replicas": 2}} for name in ("a", "b")]})
    plan = plan_pools(config, [node("n1", **{"gpu-node": "yes"})], {})
    assert [p.pool for p in plan.nodes] == ["a"]
    assert plan.problems == ["node n1 matches pools a and b; make the pools' nodeSelectors disjoint"]


def test_the_plan_holds_every_parent_queue_even_without_pools():
    """Tenants need a parent queue whether or not the operator labels any node."""
    plan = plan_pools(OperatorConfig.model_validate({"parentQueues": ["research"]}), [], {})
    assert [(q["kind"], q["metadata"]["name"]) for q in plan.parent_queues] == [("Queue", "research"), ("Queue", "gpu-tenants")]
    assert all("parentQueue" not in q["spec"] for q in plan.parent_queues)
    assert [q["metadata"]["name"] for q in plan_pools(CONFIG, [], {}).parent_queues] == ["gpu-tenants"]


def test_a_parent_queue_is_never_applied_over_a_tenants_queue():
    [queue] = plan_pools(CONFIG, [], {}).parent_queues
    tenants_queue = {"metadata": {"name": "gpu-tenants", "labels": {"gputenant.io/tenant": "gpu-tenants"}}}
    assert parent_queue_conflict(queue, tenants_queue) == (
        "parent queue gpu-tenants is not applied: KAI Queue gpu-tenants is the queue of tenant gpu-tenants; rename the "
        "parent queue (operator config parentQueues or defaultParentQueue) or offboard tenant gpu-tenants")
    assert parent_queue_conflict(queue, None) is None
    assert parent_queue_conflict(queue, {"metadata": {"name": "gpu-tenants", "labels": queue["metadata"]["labels"]}}) is None
    assert parent_queue_conflict(queue, {"metadata": {"name": "gpu-tenants"}}) is None


def test_report_counts_what_the_policy_granted_never_what_the_spec_asked():
    """Issue 17: a tenant refused with PoolModeMismatch showed as 1 GPU granted on the pool its
    spec named."""
    refused = {"metadata": {"name": "wrong-mode", "generation": 1},
               "spec": {"trust": "Untrusted", "gpu": {"quota": 1, "pool": "ts"}},
               "status": {"observedGeneration": 1, "sharing": {"reason": "gpu.pool ts is a TimeSlicing pool"},
                          "conditions": [{"type": "Ready", "status": "False", "reason": "PoolModeMismatch"}]}}
    not_reconciled_yet = {"metadata": {"name": "new", "generation": 1}, "spec": {"gpu": {"quota": 2, "pool": "ts"}}}
    spec_raised_since = {"metadata": {"name": "raised", "generation": 3}, "spec": {"gpu": {"quota": 8, "pool": "ts"}},
                         "status": {"observedGeneration": 2, "sharing": {"pool": "ts"}}}
    granted = {"metadata": {"name": "granted", "generation": 3}, "spec": {"gpu": {"quota": 1, "pool": "ts"}},
               "status": {"observedGeneration": 3, "sharing": {"pool": "ts"}}}
    grants = grants_from_tenants([refused, not_reconciled_yet, spec_raised_since, granted])
    assert grants == [TenantGrant("granted", "ts", 1, 1)]
    [ts] = [r for r in pool_reports(CONFIG, [node("ts-1", pool="ts")], grants) if r.name == "ts"]
    assert (ts.granted, ts.tenants) == (1, ["granted"])


def test_report_counts_nodes_gpus_grants_and_overcommit():
    nodes = [node("ts-1", pool="ts"), node("ts-2", gpus=4, pool="ts"), node("mig-1", pool="mig")]
    tenants = [
        {"metadata": {"name": "a"}, "spec": {"gpu": {"quota": 6, "limit": 8}}, "status": {"sharing": {"pool": "ts"}}},
        {"metadata": {"name": "b", "generation": 2}, "spec": {"gpu": {"quota": 4, "pool": "ts"}},
         "status": {"observedGeneration": 2, "sharing": {"mode": "TimeSlicing", "pool": "ts"}}},
        {"metadata": {"name": "c"}, "spec": {"gpu": {"quota": 1}}},
    ]
    grants = grants_from_tenants(tenants)
    assert grants == [TenantGrant("a", "ts", 6, 8), TenantGrant("b", "ts", 4, 4)]
    reports = {r.name: r for r in pool_reports(CONFIG, nodes, grants)}
    ts = reports["ts"]
    assert (ts.nodes, ts.node_gpus, ts.capacity, ts.granted, ts.burst, ts.tenants) == (
        ["ts-1", "ts-2"], 12, 8, 10, 12, ["a", "b"])
    assert ts.overcommit == 1.25
    assert reports["mig"].capacity == 8 and reports["mig"].overcommit == 0
    assert reports["whole"].overcommit is None
    table = format_table(list(reports.values())).splitlines()
    assert table[0].split() == ["POOL", "MODE", "NODES", "GPUS", "GRANTED", "BURST", "OVERCOMMIT", "TENANTS"]
    assert table[1].split() == ["ts", "TimeSlicing", "2", "8", "10", "12", "1.25", "a,b"]
    metrics = format_metrics(list(reports.values()))
    assert 'gputenant_pool_overcommit_ratio{mode="TimeSlicing",pool="ts"} 1.25' in metrics.splitlines()
    assert 'gputenant_pool_overcommit_ratio{pool="whole"' not in metrics
