"""Apply the GPU pools' node labels and device-plugin ConfigMap, and the platform's parent KAI
Queues: server-side apply, no write when the cluster already holds them, MIG relabelling held back
(and reported) on nodes running GPU pods. Parent queues are never deleted here: a tenant's Queue
under one that vanished would never be scheduled again."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from gputenant import API_VERSION, KIND, naming
from gputenant.config.models import OperatorConfig
from gputenant.guard.pods import requests_gpus
from gputenant.kube import ApiError, KubeClient, holds
from gputenant.pools.kai_version import KAI_CONFIG
from gputenant.pools.leaks import add_leak_problems, unexplained_reservations
from gputenant.pools.plan import BlockedChange, PoolsPlan, parent_queue_conflict, plan_pools
from gputenant.pools.report import PoolReport, grants_from_tenants, pool_reports
from gputenant.timefmt import rfc3339

FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass
class PoolsApplyResult:
    plan: PoolsPlan
    written: list[str] = field(default_factory=list)
    """Objects written, e.g. "Node/gpu-1", "Queue/gpu-tenants" or
    "ConfigMap/gpu-operator/gputenant-device-plugin-config"."""

    @property
    def blocked(self) -> list[BlockedChange]:
        return self.plan.blocked


def gpu_pods_by_node(pods: list[dict]) -> dict[str, list[str]]:
    """namespace/name of the unfinished GPU pods bound to each node."""
    bound: dict[str, list[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in FINISHED_PHASES or not requests_gpus(pod):
            continue
        metadata = pod["metadata"]
        bound.setdefault(node, []).append(f"{metadata['namespace']}/{metadata['name']}")
    return bound


def device_plugin_config_map(config: OperatorConfig, data: dict[str, str]) -> dict:
    target = config.device_plugin_config_map
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": target.name, "namespace": target.namespace,
                     "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY,
                                naming.COMPONENT_LABEL: "device-plugin-config"}},
        "data": data,
    }


async def apply_pools(client: KubeClient, config: OperatorConfig) -> PoolsApplyResult:
    """Bring nodes, the device-plugin ConfigMap and the parent queues in line with the config;
    idempotent."""
    nodes = await client.list("v1", "Node")
    pods = await client.list("v1", "Pod")
    plan = plan_pools(config, nodes, gpu_pods_by_node(pods))
    result = PoolsApplyResult(plan=plan)

    if plan.config_map_data:
        await _apply_device_plugin_config(client, config, result)

    await _apply_parent_queues(client, result)

    for node_plan in plan.nodes:
        if node_plan.changed:
            await client.apply({"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": node_plan.node, "labels": node_plan.labels}})
            result.written.append(f"Node/{node_plan.node}")

    nodes_by_name = {n["metadata"]["name"]: n for n in nodes}
    for blocked in plan.blocked:
        await _report_blocked(client, nodes_by_name[blocked.node], blocked)
    return result


async def _apply_device_plugin_config(client: KubeClient, config: OperatorConfig, result: PoolsApplyResult) -> None:
    """The device-plugin ConfigMap; without its namespace (no GPU Operator yet), a problem instead, so
    that the parent queues, without which KAI schedules nothing, and the node labels still apply."""
    desired = device_plugin_config_map(config, result.plan.config_map_data)
    metadata = desired["metadata"]
    live = await client.get("v1", "ConfigMap", metadata["name"], metadata["namespace"])
    if holds(desired, live) and set((live or {}).get("data") or {}) == set(result.plan.config_map_data):
        return
    try:
        await client.apply(desired)
    except ApiError as error:
        if not error.not_found:
            raise
        result.plan.problems.append(
            f"device-plugin ConfigMap {metadata['namespace']}/{metadata['name']} is not applied: {error.message}; "
            "install the GPU Operator or set devicePluginConfigMap.namespace to its namespace")
        return
    result.written.append(f"ConfigMap/{metadata['namespace']}/{metadata['name']}")


async def _apply_parent_queues(client: KubeClient, result: PoolsApplyResult) -> None:
    """Each parent Queue that differs from the live one; without KAI's Queue CRD, a problem instead
    (the nodes are still labelled)."""
    for queue in result.plan.parent_queues:
        name = queue["metadata"]["name"]
        try:
            live = await client.get(queue["apiVersion"], queue["kind"], name)
        except ApiError as error:
            if not error.not_found:
                raise
            result.plan.problems.append(f"parent queues are not applied: {error.message}; install KAI-Scheduler")
            return
        conflict = parent_queue_conflict(queue, live)
        if conflict:
            result.plan.problems.append(conflict)
        elif not holds(queue, live):
            await client.apply(queue)
            result.written.append(f"Queue/{name}")


async def _report_blocked(client: KubeClient, node: dict, blocked: BlockedChange) -> None:
    """A Warning Event on the Node, unless the same message is already there (no event storm on
    every reconcile)."""
    answer = await client.request("GET", "/api/v1/namespaces/default/events", params={
        "fieldSelector": f"involvedObject.kind=Node,involvedObject.name={blocked.node},reason={blocked.reason}"})
    if any(event.get("message") == blocked.message for event in answer.get("items", [])):
        return
    node = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
    timestamp = rfc3339(datetime.now(UTC))
    await client.post_event(node, "Warning", blocked.reason, blocked.message, timestamp)


async def read_kai_config(client: KubeClient) -> dict | None:
    """KAI's Config ``kai-config``; None where KAI was installed without its chart (no such kind or
    object) or the operator may not read it."""
    api_version, kind, name = KAI_CONFIG
    try:
        return await client.get(api_version, kind, name)
    except ApiError as error:
        if error.not_found or error.status == 403:
            return None
        raise


async def collect_pool_reports(client: KubeClient, config: OperatorConfig,
                               now: datetime | None = None) -> list[PoolReport]:
    """The per-pool report from the cluster's Nodes and GpuTenants (none while the CRD is absent), with the
    GPUs KAI's reservations hold that no live tenant share explains (``pools.leaks``), judged at `now`."""
    nodes = await client.list("v1", "Node")
    try:
        tenants = await client.list(API_VERSION, KIND)
    except ApiError as error:
        if not error.not_found:
            raise
        tenants = []
    gpu_pods = await client.list("v1", "Pod", label_selector=naming.QUEUE_LABEL)
    reports = pool_reports(config, nodes, grants_from_tenants(tenants), gpu_pods, await read_kai_config(client))
    reservations = await client.list("v1", "Pod", namespace=config.kai_reservation_namespace)
    if reservations:
        namespaces = await client.list("v1", "Namespace", label_selector=naming.TENANT_LABEL)
        held = unexplained_reservations(reservations, await client.list("v1", "Pod"),
                                        [n["metadata"]["name"] for n in namespaces], now or datetime.now(UTC))
        add_leak_problems(reports, held, config.kai_reservation_namespace)
    return reports
