"""Checks on GpuTenant changes that need the state of the cluster: what other tenants already hold
in the pool, which GPU resources the tenant's running pods use, and whose queues are tenants'
(a tenant's parentQueue may not be one)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError

from gputenant import naming
from gputenant.api.hub import ConversionError, GpuTenantSpec, spec_from_stored
from gputenant.config.models import OperatorConfig
from gputenant.guard.tenant_admission import parent_queue_problem
from gputenant.policy.choose import decide
from gputenant.policy.decision import Decision


def pool_capacity_problem(name: str, spec: GpuTenantSpec, decision: Decision,
                          others: Iterable[tuple[str, float, str | None]]) -> str | None:
    """A refusal when the tenant's guaranteed GPUs no longer fit next to the other tenants' in its
    pool. `others` holds (tenant, quota, pool) of every other tenant."""
    pool = decision.pool
    if not decision.possible or pool is None or pool.gpus is None:
        return None
    holders = [(tenant, quota) for tenant, quota, their_pool in others if their_pool == pool.name and quota]
    taken = round(sum(quota for _, quota in holders), 6)
    if taken + spec.gpu.quota <= pool.gpus:
        return None
    free = max(round(pool.gpus - taken, 6), 0)
    held = ", ".join(f"{tenant}: {quota:g}" for tenant, quota in sorted(holders))
    return (f"[pool-capacity] gpu.quota {spec.gpu.quota:g} of tenant {name} does not fit pool {pool.name}: it has "
            f"{pool.gpus} GPUs and {taken:g} are guaranteed to other tenants ({held}); lower gpu.quota to at most "
            f"{free:g} or choose another pool with gpu.pool")


def resources_in_use_problem(name: str, before: Decision, after: Decision,
                             pods: Iterable[tuple[str, dict[str, str]]], namespace: str) -> str | None:
    """A refusal when the change withdraws a GPU resource (e.g. a MIG profile) running pods use:
    those pods would keep it outside the tenant's new policy, and MIG layouts change only on drained nodes."""
    granted_before = set(before.pod_rules.gpu_resources) if before.possible and before.pod_rules else set()
    granted_after = set(after.pod_rules.gpu_resources) if after.possible and after.pod_rules else set()
    withdrawn = granted_before - granted_after
    users: dict[str, list[str]] = {}
    for pod_name, resources in pods:
        for resource in withdrawn & set(resources):
            users.setdefault(resource, []).append(f"{namespace}/{pod_name}")
    if not users:
        return None
    parts = []
    for resource, pod_names in sorted(users.items()):
        what = (f"MIG profile {resource.removeprefix('nvidia.com/mig-')}" if resource.startswith("nvidia.com/mig-")
                else resource)
        parts.append(f"{what} is used by {', '.join(sorted(pod_names))}")
    return (f"[gpu-resource-in-use] the change withdraws what running pods of tenant {name} use: {'; '.join(parts)}; "
            "delete those pods first, then change the tenant")


def judges_spec(body: dict, old: dict | None) -> bool:
    """Whether a GpuTenant review is one to judge: a CREATE, or an UPDATE of the spec. An UPDATE of
    metadata alone (the operator's finalizer and annotations, several per tenant while it onboards;
    a platform engineer's label) re-judges nothing: the spec was admitted as it is, and a refusal
    there would freeze the operator's own writes, its finalizer's removal included."""
    return old is None or (old.get("spec") or {}) != (body.get("spec") or {})


def check_tenant_change(config: OperatorConfig, name: str, spec: GpuTenantSpec, old_spec: dict | None,
                        other_tenants: Iterable[tuple[str, GpuTenantSpec, Decision]],
                        gpu_pods: Iterable[tuple[str, dict[str, str]]]) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for a GpuTenant create/update. `other_tenants` are (name, spec, decision)
    of every other tenant; `gpu_pods` are (pod name, GPU resources) in the tenant's host namespace."""
    decision = decide(name, spec, config)
    other_tenants = list(other_tenants)
    parent_queue = parent_queue_problem(name, spec, [other for other, _, _ in other_tenants if other != name], config)
    problems = [parent_queue] if parent_queue else []
    others = [(other, other_spec.gpu.quota, _pool_name(d)) for other, other_spec, d in other_tenants if other != name]
    before: tuple[GpuTenantSpec, Decision] | None = None
    if old_spec is not None:
        try:
            validated = spec_from_stored(old_spec)
            before = (validated, decide(name, validated, config))
        except (ValidationError, ConversionError):
            before = None
    if before is None or _guarantee_grows(before, spec, decision):
        capacity = pool_capacity_problem(name, spec, decision, others)
        if capacity:
            problems.append(capacity)
    if before is not None:
        in_use = resources_in_use_problem(name, before[1], decision, gpu_pods, naming.host_namespace(name, config))
        if in_use:
            problems.append(in_use)
    return problems, list(decision.warnings)


def _pool_name(decision: Decision) -> str | None:
    return decision.pool.name if decision.possible and decision.pool else None


def _guarantee_grows(before: tuple[GpuTenantSpec, Decision], spec: GpuTenantSpec, decision: Decision) -> bool:
    """Whether an update asks its pool for more than the tenant already holds there. Only such an
    update is refused for capacity: an over-committed pool (tenants admitted at the same moment,
    or a pool shrunk in the config) must not freeze its tenants' other changes, e.g. clearing
    spec.preventDeletion to offboard one of them."""
    old_spec, old_decision = before
    return _pool_name(decision) != _pool_name(old_decision) or spec.gpu.quota > old_spec.gpu.quota
