"""What the GPU pools of the operator config need from the cluster, as pure functions.

Pools are prepared by NVIDIA's GPU Operator from node labels and one device-plugin ConfigMap (HAMi
pools are KAI GPU fractions on NVIDIA's device plugin, docs/units.md: HAMi's own device plugin, which
selects nodes labelled ``gpu=on``, must not run on them); this module computes those labels and that ConfigMap from ``OperatorConfig.pools``, and
the platform's parent KAI Queues that every tenant Queue hangs under, so ``apply.py`` only has to
compare and write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool, PoolMode
from gputenant.render import render_parent_queues
from gputenant.sharing import registry
from gputenant.sharing.mig import MIG_CONFIG_LABEL
from gputenant.sharing.time_slicing import device_plugin_config_name

HAMI_DEVICE_PLUGIN_LABEL = ("gpu", "on")
"""The node label HAMi's device plugin DaemonSet selects by default (HAMi chart ``devicePlugin.nodeSelector``).
Beside NVIDIA's device plugin it would advertise the same GPUs a second time and hand them out outside KAI."""
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
"""Physical GPUs of a node, as GPU feature discovery labels it."""


class PoolConfigError(ValueError):
    """A pool in the operator config cannot be applied; the message names the field and the fix."""


def device_plugin_config_data(config: OperatorConfig) -> dict[str, str]:
    """``data`` of the device-plugin ConfigMap: one YAML document per pool whose mechanism has one
    (time-slicing's)."""
    data: dict[str, str] = {}
    for pool in config.pools:
        document = registry.of_pool(pool).device_plugin_config(pool)
        if document is None:
            continue
        key = device_plugin_config_name(pool)
        if key in data:
            raise PoolConfigError(f"pools[{pool.name}].devicePluginConfig {key!r} is used by two pools: "
                                  "give each time-slicing pool its own name")
        data[key] = yaml.safe_dump(document, sort_keys=False)
    return data


def desired_node_labels(pool: Pool) -> dict[str, str]:
    """Labels every node of the pool must carry for its sharing mechanism to be set up."""
    return registry.of_pool(pool).node_labels(pool)


def hami_device_plugin_problems(pool: Pool, nodes: list[dict]) -> list[str]:
    """Where HAMi's device plugin would start on a HAMi pool (KAI fractions on NVIDIA's device plugin)."""
    if pool.mode != PoolMode.HAMI:
        return []
    key, value = HAMI_DEVICE_PLUGIN_LABEL
    why = ("the label HAMi's device plugin selects: it would run beside NVIDIA's (HAMi pools are KAI GPU "
           "fractions on NVIDIA's device plugin)")
    if pool.node_selector.get(key) == value:
        return [f"pool {pool.name} selects nodes by {key}={value}, {why}; remove {key} from "
                f"pools[{pool.name}].nodeSelector and the label from its nodes"]
    return [f"node {node_name(n)} of pool {pool.name} carries {key}={value}, {why}; remove the label "
            f"(kubectl label node {node_name(n)} {key}-)" for n in pool_nodes(pool, nodes)
            if node_labels(n).get(key) == value]


def node_labels(node: dict) -> dict[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def node_name(node: dict) -> str:
    return node["metadata"]["name"]


def pool_nodes(pool: Pool, nodes: list[dict]) -> list[dict]:
    """Nodes whose labels match the pool's nodeSelector. A pool without one selects no node: the
    operator never labels a whole cluster."""
    if not pool.node_selector:
        return []
    return [n for n in nodes if all(node_labels(n).get(k) == v for k, v in pool.node_selector.items())]


def node_gpus(node: dict) -> int:
    try:
        return int(node_labels(node).get(GPU_COUNT_LABEL, "0"))
    except ValueError:
        return 0


@dataclass(frozen=True)
class NodeLabelPlan:
    """The labels the operator applies to one node (its whole owned set, for server-side apply)."""

    node: str
    pool: str
    labels: dict[str, str]
    changed: bool


@dataclass(frozen=True)
class BlockedChange:
    """A label the operator must not change now, and why (reported as an Event on the node)."""

    node: str
    pool: str
    label: str
    current: str | None
    wanted: str
    reason: str
    message: str


@dataclass
class PoolsPlan:
    config_map_data: dict[str, str]
    parent_queues: list[dict] = field(default_factory=list)
    """The platform's parent KAI Queues, whole, for server-side apply."""
    nodes: list[NodeLabelPlan] = field(default_factory=list)
    blocked: list[BlockedChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def plan_pools(config: OperatorConfig, nodes: list[dict], gpu_pods_by_node: dict[str, list[str]]) -> PoolsPlan:
    """Labels per node and the ConfigMap data. A MIG layout change on a node with GPU pods bound is
    held back: mig-manager would stop those workloads, and it needs a drained node."""
    plan = PoolsPlan(config_map_data=device_plugin_config_data(config), parent_queues=render_parent_queues(config))
    owner: dict[str, str] = {}
    for pool in config.pools:
        if not pool.node_selector:
            plan.problems.append(f"pool {pool.name} has no nodeSelector, so no node is labelled for it; "
                                 "set pools[].nodeSelector")
            continue
        plan.problems.extend(hami_device_plugin_problems(pool, nodes))
        wanted = desired_node_labels(pool)
        for node in pool_nodes(pool, nodes):
            name = node_name(node)
            if name in owner:
                plan.problems.append(f"node {name} matches pools {owner[name]} and {pool.name}; "
                                     "make the pools' nodeSelectors disjoint")
                continue
            owner[name] = pool.name
            if not wanted:
                continue
            live = node_labels(node)
            labels = dict(wanted)
            current_mig = live.get(MIG_CONFIG_LABEL)
            if MIG_CONFIG_LABEL in wanted and current_mig != wanted[MIG_CONFIG_LABEL] and gpu_pods_by_node.get(name):
                pods = ", ".join(sorted(gpu_pods_by_node[name]))
                plan.blocked.append(BlockedChange(
                    node=name, pool=pool.name, label=MIG_CONFIG_LABEL, current=current_mig,
                    wanted=wanted[MIG_CONFIG_LABEL], reason=reasons.MIG_RECONFIGURATION_BLOCKED,
                    message=(f"pool {pool.name} wants {MIG_CONFIG_LABEL}={wanted[MIG_CONFIG_LABEL]} but GPU pods "
                             f"are bound to node {name} ({pods}); drain the node to change its MIG layout")))
                if current_mig is None:
                    del labels[MIG_CONFIG_LABEL]
                else:
                    labels[MIG_CONFIG_LABEL] = current_mig
            changed = any(live.get(k) != v for k, v in labels.items())
            plan.nodes.append(NodeLabelPlan(node=name, pool=pool.name, labels=labels, changed=changed))
    return plan


def parent_queue_conflict(queue: dict, live: dict | None) -> str | None:
    """Why the parent queue must not be applied over the live Queue of its name: that Queue is a
    tenant's (applying would take its parent and labels, and the tenant's next reconcile would
    take them back). None when it is free, absent, or already a parent queue."""
    tenant = ((live or {}).get("metadata", {}).get("labels") or {}).get(naming.TENANT_LABEL)
    if tenant is None:
        return None
    name = queue["metadata"]["name"]
    return (f"parent queue {name} is not applied: KAI Queue {name} is the queue of tenant {tenant}; rename the "
            f"parent queue (operator config parentQueues or defaultParentQueue) or offboard tenant {tenant}")
