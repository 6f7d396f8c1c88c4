"""GPUs held by share: what each tenant's running pods hold right now, in physical GPUs, counted by
the mechanism of the tenant's pool (docs/metrics.md, "GPU-hours and cost by share"). Pure.

A KAI fraction (HAMi mode) counts its ``gpu-fraction``; a time-slice replica 1/replicas of its GPU;
a MIG instance 1/n, n being the instances of its profile that make one GPU (as the tenant's quota
counts it, docs/units.md); a whole GPU 1. Tenants whose shares fill one GPU so hold exactly 1.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.guard.keys import FRACTION_ANNOTATIONS
from gputenant.guard.pods import pod_gpu_amounts
from gputenant.sharing import registry
from gputenant.sharing.mig import PROFILE_PREFIX, instance_share
from gputenant.usage.model import tenant_namespaces

WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
FINISHED_PHASES = ("Succeeded", "Failed")


def _fraction(pod: dict) -> Decimal:
    written = ((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION_ANNOTATIONS[0])
    try:
        return max(Decimal(str(written)), Decimal(0)) if written is not None else Decimal(0)
    except InvalidOperation:
        return Decimal(0)


def pod_gpu_share(pod: dict, pool: Pool) -> float:
    """The physical GPUs the pod holds on `pool`, by share."""
    share = _fraction(pod)
    for name, amount in pod_gpu_amounts(pod).items():
        if name.startswith(PROFILE_PREFIX):
            share += instance_share(pool, name.removeprefix(PROFILE_PREFIX), amount)
        elif name in WHOLE_GPU_RESOURCES:
            share += registry.of_pool(pool).whole_resource_share(pool, amount)
    return float(share)


def holds_gpus(pod: dict) -> bool:
    """Placed on a node and not finished: it holds what it asked for."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def tenant_shares(placements: dict[str, tuple[str, Pool]], pods: list[dict]) -> dict[str, tuple[str, float]]:
    """Tenant -> (pool, GPUs held by share) from `placements` (tenant -> (host namespace, its pool))
    and the pods of those namespaces; a placed tenant without pods holds 0."""
    by_namespace = {namespace: tenant for tenant, (namespace, _) in placements.items()}
    held = {tenant: 0.0 for tenant in placements}
    for pod in pods:
        tenant = by_namespace.get((pod.get("metadata") or {}).get("namespace", ""))
        if tenant is not None and holds_gpus(pod):
            held[tenant] += pod_gpu_share(pod, placements[tenant][1])
    return {tenant: (placements[tenant][1].name, shares) for tenant, shares in held.items()}


def placements(tenants: list[dict], config: OperatorConfig) -> dict[str, tuple[str, Pool]]:
    """Tenant -> (host namespace, pool) for every tenant the policy placed on a configured pool
    (``status.sharing.pool``)."""
    namespaces = tenant_namespaces(tenants, config)
    placed = {}
    for tenant in tenants:
        pool = config.pool(((tenant.get("status") or {}).get("sharing") or {}).get("pool") or "")
        if pool is not None:
            placed[tenant["metadata"]["name"]] = (namespaces[tenant["metadata"]["name"]], pool)
    return placed
