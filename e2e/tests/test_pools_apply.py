"""GPU pool configuration applied to SIMULATED GPU nodes (kubeplane.gpu_nodes: Nodes labelled and
sized as the GPU Operator leaves them, kept Ready by kwok, which also runs the pod bound to one) and
the platform's parent KAI Queues (upstream Queue CRD), through the real apiserver, counted in the
audit log."""

from __future__ import annotations

import asyncio

import kubernetes
import pytest
import yaml

from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.kube import KubeClient
from gputenant.pools.apply import apply_pools
from kubeplane import wait_for
from kubeplane.fixtures import install_crds, install_kai_queue_crd
from kubeplane.gpu_nodes import create_nodes, gpu_node
from kubeplane.kai import crd_dir

QUEUES = ("scheduling.run.ai", "v2", "queues")
CONFIG = OperatorConfig.model_validate({
    "fieldManager": "gputenant-pools-test",
    "defaultParentQueue": "pools-test-tenants",
    "parentQueues": [{"name": "pools-test-research", "displayName": "Research", "priority": 200,
                      "resources": {"gpu": {"quota": 8, "limit": 12.5, "overQuotaWeight": 2}}}],
    "devicePluginConfigMap": {"name": "gputenant-device-plugin-config", "namespace": "gpu-operator-pools"},
    "pools": [
        {"name": "pool-ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
         "nodeSelector": {"pools-test": "ts"}, "timeSlicing": {"replicas": 4}},
        {"name": "pool-mig", "mode": "MIG", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
         "nodeSelector": {"pools-test": "mig"}, "mig": {"config": "all-1g.10gb", "profiles": ["1g.10gb"]}},
        {"name": "pool-hami", "mode": "HAMi", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
         "nodeSelector": {"pools-test": "hami"}, "hami": {"splitCount": 10}},
    ]})


def run_apply(plane, config: OperatorConfig = CONFIG):
    async def main():
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), config.field_manager,
                                              user_agent="gputenant-pools-test") as client:
            return await apply_pools(client, config)
    return asyncio.run(main())


def queue(plane, name: str) -> dict:
    with plane.api_client() as client:
        return kubernetes.client.CustomObjectsApi(client).get_cluster_custom_object(*QUEUES, name)


def labels(plane, node: str) -> dict:
    with plane.api_client() as client:
        return kubernetes.client.CoreV1Api(client).read_node(node).metadata.labels


def unconfigured(labels: dict[str, str]) -> Pool:
    """The shape of a GPU node before any pool configuration reached it: whole GPUs, MIG disabled,
    no device-plugin config; only the labels a pool selects it by."""
    return Pool.model_validate({"name": "unconfigured", "mode": "Exclusive", "gpuModel": "A100-80GB",
                                "gpuMemoryMiB": 81920, "nodeSelector": labels})


BALANCED_MIG = Pool.model_validate({
    "name": "balanced", "mode": "MIG", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
    "nodeSelector": {"pools-test": "mig"}, "mig": {"config": "all-balanced", "profiles": ["1g.10gb"]}})
"""The shape of pools-mig-busy: partitioned all-balanced before pool-mig asked for all-1g.10gb."""
NODES = [
    gpu_node("pools-ts-1", unconfigured({"pools-test": "ts"}), gpus=8),
    gpu_node("pools-mig-free", unconfigured({"pools-test": "mig"}), gpus=8),
    gpu_node("pools-mig-busy", BALANCED_MIG, gpus=8),
    gpu_node("pools-hami-1", unconfigured({"pools-test": "hami"}), gpus=8),
    gpu_node("pools-other", unconfigured({"pools-test": "none"}), gpus=8),
]


@pytest.fixture(scope="module")
def gpu_nodes(plane, kwok):
    install_kai_queue_crd(plane)
    with plane.api_client() as client:
        create_nodes(client, NODES)
    plane.create_namespace("gpu-operator-pools")
    plane.create_namespace("pools-workloads")
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_pod("pools-workloads", {
            "metadata": {"name": "trainer"},
            "spec": {"nodeName": "pools-mig-busy", "containers": [{
                "name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}})
        wait_for(lambda: core.read_namespaced_pod("trainer", "pools-workloads").status.phase == "Running",
                 timeout=30, what="kwok to run the trainer pod")
    yield
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        for node in NODES:
            core.delete_node(node.name)
        core.delete_namespace("pools-workloads")
        core.delete_namespace("gpu-operator-pools")
    for name in ("pools-test-research", "pools-test-tenants", "pools-test-taken"):
        plane.kubectl("delete", "queue", name, "--ignore-not-found")


def test_pools_are_applied_then_idempotent_and_mig_nodes_with_gpu_pods_are_left_alone(plane, gpu_nodes):
    first = run_apply(plane)
    assert sorted(first.written) == ["ConfigMap/gpu-operator-pools/gputenant-device-plugin-config",
                                     "Node/pools-mig-free", "Node/pools-ts-1",
                                     "Queue/pools-test-research", "Queue/pools-test-tenants"]
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    research, default = queue(plane, "pools-test-research"), queue(plane, "pools-test-tenants")
    assert research["spec"] == {"displayName": "Research", "priority": 200, "resources": {
        "gpu": {"quota": 8, "limit": 12.5, "overQuotaWeight": 2}, "cpu": unlimited, "memory": unlimited}}
    assert default["spec"] == {"displayName": "pools-test-tenants", "priority": 100,
                               "resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}
    assert default["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-tenant-operator",
                                             "gputenant.io/component": "parent-queue"}
    assert labels(plane, "pools-ts-1")["nvidia.com/device-plugin.config"] == "pool-ts"
    assert labels(plane, "pools-mig-free")["nvidia.com/mig.config"] == "all-1g.10gb"
    assert labels(plane, "pools-mig-busy")["nvidia.com/mig.config"] == "all-balanced"
    assert "gpu" not in labels(plane, "pools-hami-1")  # HAMi mode is KAI fractions: HAMi's device plugin stays off
    assert "nvidia.com/device-plugin.config" not in labels(plane, "pools-other")

    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        data = core.read_namespaced_config_map("gputenant-device-plugin-config", "gpu-operator-pools").data
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=pools-mig-busy").items
    assert {key: yaml.safe_load(value) for key, value in data.items()} == {"pool-ts": {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}}
    assert [(e.type, e.reason, e.message) for e in events] == [(
        "Warning", "MigReconfigurationBlocked",
        "pool pool-mig wants nvidia.com/mig.config=all-1g.10gb but GPU pods are bound to node pools-mig-busy "
        "(pools-workloads/trainer); drain the node to change its MIG layout")]
    assert [b.node for b in first.blocked] == ["pools-mig-busy"]

    offset = plane.audit_offset()
    second = run_apply(plane)
    assert second.written == []
    assert [b.node for b in second.blocked] == ["pools-mig-busy"]
    assert plane.count_requests(offset, user_agent="gputenant-pools-test") == 0


def test_mig_node_is_relabelled_once_its_gpu_pods_are_gone(plane, gpu_nodes):
    with plane.api_client() as client:
        kubernetes.client.CoreV1Api(client).delete_namespaced_pod("trainer", "pools-workloads", grace_period_seconds=0)
    result = run_apply(plane)
    assert result.written == ["Node/pools-mig-busy"]
    assert labels(plane, "pools-mig-busy")["nvidia.com/mig.config"] == "all-1g.10gb"


def test_pools_command_prints_the_report(plane, gpu_nodes, tmp_path, capsys):
    from gputenant.cli import main

    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG.model_dump(by_alias=True, mode="json")))
    assert main(["pools", "--config", str(config_path), "--kubeconfig", str(plane.kubeconfig_path)]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert table == [
        ["POOL", "MODE", "NODES", "GPUS", "GRANTED", "BURST", "OVERCOMMIT", "TENANTS"],
        ["pool-ts", "TimeSlicing", "1", "8", "0", "0", "0.00", "-"],
        ["pool-mig", "MIG", "2", "16", "0", "0", "0.00", "-"],
        ["pool-hami", "HAMi", "1", "8", "0", "0", "0.00", "-"],
    ]
    assert main(["pools", "--config", str(config_path), "--kubeconfig", str(plane.kubeconfig_path), "--metrics"]) == 0
    assert 'gputenant_pool_gpus{mode="MIG",pool="pool-mig"} 16.0' in capsys.readouterr().out.splitlines()


def test_a_parent_queue_changed_by_hand_is_restored(plane, gpu_nodes):
    plane.kubectl("patch", "queue", "pools-test-research", "--type=merge",
                  "-p", '{"spec": {"resources": {"gpu": {"quota": 100}}}}')
    result = run_apply(plane)
    assert result.written == ["Queue/pools-test-research"]
    assert queue(plane, "pools-test-research")["spec"]["resources"]["gpu"]["quota"] == 8


def test_a_tenants_queue_is_never_taken_for_a_parent_queue(plane, gpu_nodes):
    """A tenant named like the default parent queue (before the webhook could refuse it): its
    Queue is reported and left as it is, not overwritten."""
    tenant_queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {
        "name": "pools-test-taken", "labels": {"gputenant.io/tenant": "pools-test-taken"}},
        "spec": {"parentQueue": "pools-test-tenants", "resources": {"gpu": {"quota": 1, "limit": 1}}}}
    plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(tenant_queue))
    config = CONFIG.model_copy(update={"default_parent_queue": "pools-test-taken"})
    offset = plane.audit_offset()
    result = run_apply(plane, config)
    assert "Queue/pools-test-taken" not in result.written
    assert ("parent queue pools-test-taken is not applied: KAI Queue pools-test-taken is the queue of tenant "
            "pools-test-taken; rename the parent queue (operator config parentQueues or defaultParentQueue) or "
            "offboard tenant pools-test-taken") in result.plan.problems
    assert queue(plane, "pools-test-taken")["spec"]["parentQueue"] == "pools-test-tenants"
    assert plane.count_requests(offset, user_agent="gputenant-pools-test") == 0


def test_without_the_gpu_operators_namespace_the_parent_queues_are_still_applied(plane, gpu_nodes):
    """The device-plugin ConfigMap cannot be written before the GPU Operator's namespace exists; KAI
    schedules nothing from a tenant queue whose parent is missing (it drops it as an orphan), so the
    parent queues do not wait for the ConfigMap: a problem is reported instead."""
    absent = CONFIG.device_plugin_config_map.model_copy(update={"namespace": "gpu-operator-absent"})
    config = CONFIG.model_copy(update={"default_parent_queue": "pools-test-no-gpu-operator",
                                       "device_plugin_config_map": absent})
    try:
        result = run_apply(plane, config)
        assert "Queue/pools-test-no-gpu-operator" in result.written
        assert queue(plane, "pools-test-no-gpu-operator")["metadata"]["name"] == "pools-test-no-gpu-operator"
        assert [p for p in result.plan.problems if p.startswith(
            "device-plugin ConfigMap gpu-operator-absent/gputenant-device-plugin-config is not applied: ")
            and p.endswith("install the GPU Operator or set devicePluginConfigMap.namespace to its namespace")]
        assert not [w for w in result.written if w.startswith("ConfigMap/")]
    finally:
        plane.kubectl("delete", "queue", "pools-test-no-gpu-operator", "--ignore-not-found")


def test_a_kai_of_another_minor_is_a_problem_of_every_pool(plane, gpu_nodes, tmp_path, capsys):
    """KAI's own Config CRD (from the pinned module) and a `kai-config` as KAI's chart writes it, one
    component at v0.13.0: `gputenant pools` names it on every pool; back at v0.12.x, nothing."""
    from gputenant.cli import main

    install_crds(plane, crd_dir() / "kai.scheduler_configs.yaml")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG.model_dump(by_alias=True, mode="json")))

    def problems() -> list[str]:
        assert main(["pools", "--config", str(config_path), "--kubeconfig", str(plane.kubeconfig_path)]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("PROBLEM")]

    kai_config = {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
                  "spec": {"namespace": "kai-scheduler",
                           "binder": {"service": {"enabled": True, "image": {"name": "binder", "tag": "v0.12.0"}}},
                           "scheduler": {"service": {"enabled": True, "image": {"name": "scheduler", "tag": "v0.13.0"}}}}}
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        custom.create_cluster_custom_object("kai.scheduler", "v1", "configs", kai_config)
        try:
            found = problems()
            assert [line.split(": ")[0] for line in found] == [f"PROBLEM {pool.name}" for pool in CONFIG.pools]
            assert all("KaiVersionUnsupported: KAI-Scheduler's scheduler runs v0.13.0" in line for line in found)
            custom.patch_cluster_custom_object("kai.scheduler", "v1", "configs", "kai-config",
                                               {"spec": {"scheduler": {"service": {"image": {"tag": "v0.12.5"}}}}})
            assert problems() == []
        finally:
            custom.delete_cluster_custom_object("kai.scheduler", "v1", "configs", "kai-config")
