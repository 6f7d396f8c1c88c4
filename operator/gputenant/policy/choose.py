"""The trust-based GPU-sharing policy: which mechanism and pool a tenant gets, and how much, in each
mechanism's own units (docs/units.md; each mechanism's units are in its module of `gputenant.sharing`). Pure: no IO, no clock,
and no exceptions for bad requests.
"""

from __future__ import annotations

from fractions import Fraction

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec
from gputenant.api.trust import SharingMode, Trust, allowed_modes, names, profile, stronger_or_equal
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.policy.decision import Decision, QueueGrant
from gputenant.quantities import parse_quantity
from gputenant.sharing import registry
from gputenant.sharing.base import WHOLE_GPU, PodRules, Refused, exact, show


def decide(name: str, spec: GpuTenantSpec, config: OperatorConfig) -> Decision:
    """Choose mechanism and pool for tenant ``name`` and size its grant; never raises for a bad request."""
    try:
        return _decide(name, spec, config)
    except Refused as refused:
        return Decision(trust=spec.trust, possible=False, reason=refused.reason, message=refused.message)


def _decide(name: str, spec: GpuTenantSpec, config: OperatorConfig) -> Decision:
    trust = spec.trust
    auto = spec.sharing.mode is SharingMode.AUTO
    mode = _requested_mode(spec, config)
    quota_gpus = spec.gpu.quota
    limit_gpus = spec.gpu.limit if spec.gpu.limit is not None else quota_gpus
    quota, limit = exact(quota_gpus), exact(limit_gpus)
    if limit < quota:
        raise Refused(
            reasons.LIMIT_BELOW_QUOTA,
            f"gpu.limit {show(limit)} is below gpu.quota {show(quota)}; raise gpu.limit to at least {show(quota)} or leave it unset",
        )
    if spec.gpu.parent_queue is not None and config.parent_queues and spec.gpu.parent_queue not in config.parent_queue_names:
        raise Refused(
            reasons.PARENT_QUEUE_NOT_ALLOWED,
            f"gpu.parentQueue {spec.gpu.parent_queue} is not one of the platform's parent queues "
            f"({', '.join(queue.name for queue in config.parent_queues)}, operator config parentQueues); name one of them or leave gpu.parentQueue unset",
        )
    if naming.queue_name(name) in config.parent_queue_names:
        raise Refused(
            reasons.QUEUE_NAME_IS_PARENT_QUEUE,
            f"the tenant's KAI Queue {naming.queue_name(name)} would be the platform's parent queue of that name "
            "(operator config parentQueues, defaultParentQueue); choose another tenant name",
        )
    parent = spec.gpu.parent_queue or config.default_parent_queue
    _check_control_plane_fits(spec)
    if limit == 0:
        return _no_gpus(name, spec, parent)

    effective_mode, pool = _choose_pool(spec, mode, auto, config)
    if pool.gpus is not None and limit > pool.gpus:
        raise Refused(
            reasons.QUOTA_ABOVE_POOL_CAPACITY,
            f"gpu.limit {show(limit)} is above the {pool.gpus} GPUs of pool {pool.name}; lower gpu.limit to at most {pool.gpus}",
        )
    grant = registry.mechanism(effective_mode).grant(spec, pool, quota_gpus, limit_gpus)

    if not auto:
        reason, why = reasons.EXPLICIT_MODE, f"sharing.mode {mode.value}"
    elif effective_mode is mode:
        reason, why = reasons.CHOSEN_FROM_TRUST, f"{trust.value} tenants get {mode.value} (operator config trustModes.{trust.value})"
    else:
        reason = reasons.FALLBACK_TO_STRONGER_MODE
        instead = (
            f"gpu.pool names {spec.gpu.pool}, a {effective_mode.value} pool, which isolates more"
            if spec.gpu.pool
            else f"no {mode.value} pool fits{_model_clause(spec)}, so the next stronger mechanism with one, {effective_mode.value}"
        )
        why = f"{trust.value} tenants get {mode.value} (operator config trustModes.{trust.value}), but {instead}"
    ignored = tuple(
        f"sharing.{other.spec_block[0]} is ignored: the tenant's GPUs are shared by {effective_mode.value}"
        for other in registry.MECHANISMS.values()
        if other.mode is not effective_mode and other.spec_block and getattr(spec.sharing, other.spec_block[1]) is not None
    )
    return Decision(
        trust=trust,
        possible=True,
        reason=reason,
        message=f"{why}; pool {pool.name} ({pool.gpu_model}): {grant.summary}",
        mode=effective_mode,
        pool=pool,
        quota=grant.quota,
        queue=_queue(name, spec, parent, grant.queue_quota, grant.queue_limit),
        pod_rules=grant.pod_rules,
        warnings=grant.warnings + ignored,
    )


def _check_control_plane_fits(spec: GpuTenantSpec) -> None:
    """The host namespace's CPU and memory quota must hold the tenant's own vCluster control plane
    (its limits count against the quota), or its pod is refused and the tenant never comes up."""
    limits = spec.vcluster.resources.limits
    for resource, quota_text, limit_text in (("cpu", spec.quotas.cpu, limits.cpu),
                                              ("memory", spec.quotas.memory, limits.memory)):
        quota, needed = parse_quantity(quota_text), parse_quantity(limit_text)
        if quota is not None and needed is not None and quota < needed:
            raise Refused(
                reasons.QUOTA_BELOW_CONTROL_PLANE,
                f"quotas.{resource} {quota_text} is below the tenant's own vCluster control plane, limited to "
                f"{limit_text} (vcluster.resources.limits.{resource}); raise quotas.{resource} to at least "
                f"{limit_text} (plus what the tenant's pods need) or lower vcluster.resources.limits.{resource}",
            )


def _requested_mode(spec: GpuTenantSpec, config: OperatorConfig) -> SharingMode:
    """The mode to aim for: explicit, or the operator's mapping for Auto; weaker than trust allows is refused."""
    trust = spec.trust
    allowed = allowed_modes(trust)
    if spec.sharing.mode is not SharingMode.AUTO:
        if spec.sharing.mode not in allowed:
            raise Refused(
                reasons.MODE_NOT_ALLOWED_FOR_TRUST,
                f"sharing.mode {spec.sharing.mode.value} isolates {trust.value} tenants too weakly; "
                f"set sharing.mode to {names(allowed)} or Auto",
            )
        return spec.sharing.mode
    mode = config.trust_modes.get(trust)
    if mode not in allowed:
        shown = mode.value if mode else "nothing"
        raise Refused(
            reasons.MODE_NOT_ALLOWED_FOR_TRUST,
            f"the operator config maps Auto for {trust.value} tenants to {shown}, which {trust.value} tenants may not use; "
            f"the platform team must set trustModes.{trust.value} to {names(allowed)} (or set sharing.mode explicitly)",
        )
    return mode


def _no_gpus(name: str, spec: GpuTenantSpec, parent: str) -> Decision:
    """gpu.limit 0: no pool needed; the quota and the guard keep every GPU resource out."""
    return Decision(
        trust=spec.trust,
        possible=True,
        reason=reasons.NO_GPU_REQUESTED,
        message="gpu.quota and gpu.limit are 0: the tenant's pods may not use GPUs; raise gpu.quota to grant some",
        quota={f"requests.{WHOLE_GPU}": "0"},
        queue=_queue(name, spec, parent, Fraction(0), Fraction(0)),
        pod_rules=PodRules(gpu_resources=(), forbid_isolation_overrides=profile(spec.trust).strict_guard),
    )


def _choose_pool(spec: GpuTenantSpec, mode: SharingMode, auto: bool, config: OperatorConfig) -> tuple[SharingMode, Pool]:
    """spec.gpu.pool if it serves the mode, else the first fitting pool; Auto may move to a stronger mode."""
    candidates = stronger_or_equal(mode) if auto else (mode,)
    if spec.gpu.pool is not None:
        pool = config.pool(spec.gpu.pool)
        if pool is None:
            raise Refused(
                reasons.POOL_NOT_FOUND,
                f"gpu.pool {spec.gpu.pool} is not in the operator config; use one of: {_list_pools(config.pools)}, or leave gpu.pool unset",
            )
        pool_mode = registry.of_pool(pool).mode
        if pool_mode not in candidates:
            raise Refused(
                reasons.POOL_MODE_MISMATCH,
                f"gpu.pool {pool.name} is a {pool_mode.value} pool, but this tenant needs {names(candidates)}; "
                f"pick a pool of {names(candidates)} ({_list_pools(_pools_of(config, candidates))})",
            )
        if spec.trust not in pool.serves:
            raise Refused(
                reasons.POOL_TRUST_MISMATCH,
                f"gpu.pool {pool.name} serves {_trusts(pool.serves)} tenants, not {spec.trust.value} ones "
                f"(operator config pools[{pool.name}].trustLevels); pick a pool that serves {spec.trust.value} "
                f"tenants ({_list_pools(_pools_serving(config, spec.trust, candidates))}) or leave gpu.pool unset",
            )
        refusal = _misfit(spec, pool_mode, pool)
        if refusal:
            raise refusal
        return pool_mode, pool

    kept_out: list[Pool] = []
    for candidate in candidates:
        fitting = [p for p in _pools_of(config, (candidate,)) if spec.gpu.model in (None, p.gpu_model)]
        pools = [p for p in fitting if spec.trust in p.serves]
        kept_out += [p for p in fitting if spec.trust not in p.serves]
        if pools:
            break
    else:
        if kept_out:
            raise Refused(
                reasons.POOL_TRUST_MISMATCH,
                f"the {names(candidates)} pools{_model_clause(spec)} ({_list_pools(kept_out)}) do not serve "
                f"{spec.trust.value} tenants (operator config pools[].trustLevels); "
                f"{'change gpu.model or ' if spec.gpu.model else ''}ask the platform team for a pool that serves them",
            )
        raise Refused(
            reasons.NO_POOL_FOR_MODE,
            f"no {names(candidates)} pool{_model_clause(spec)} in the operator config (pools: {_list_pools(config.pools)}); "
            f"{'change gpu.model or ' if spec.gpu.model else ''}ask the platform team for such a pool",
        )
    refusals = []
    for pool in pools:
        refusal = _misfit(spec, candidate, pool)
        if refusal is None:
            return candidate, pool
        refusals.append(refusal)
    raise _pools_refusal(spec, candidate, pools, refusals)


def _misfit(spec: GpuTenantSpec, mode: SharingMode, pool: Pool) -> Refused | None:
    """Why the pool cannot serve the tenant's model or the mechanism's parameters; None when it can."""
    if spec.gpu.model is not None and pool.gpu_model != spec.gpu.model:
        return Refused(
            reasons.POOL_MODEL_MISMATCH,
            f"gpu.pool {pool.name} has {pool.gpu_model} GPUs, not gpu.model {spec.gpu.model}; change or unset one of them",
        )
    return registry.mechanism(mode).misfit(spec, pool)


def _pools_refusal(spec: GpuTenantSpec, mode: SharingMode, pools: list[Pool], refusals: list[Refused]) -> Refused:
    """No pool of the mode fits: a profile some GPU has beats one no GPU has, which beats the rest."""
    listed = "; ".join(dict.fromkeys(refusal.message for refusal in refusals))
    for reason in (reasons.PROFILE_NOT_IN_POOL, reasons.PROFILE_NOT_ON_GPU):
        if any(refusal.reason == reason for refusal in refusals):
            return Refused(reason, f"no {mode.value} pool fits: {listed}")
    return Refused(reasons.NO_POOL_FOR_MODE, f"no {mode.value} pool{_model_clause(spec)} fits: {listed}")


def _queue(name: str, spec: GpuTenantSpec, parent: str, quota: Fraction, limit: Fraction) -> QueueGrant:
    """Always with an explicit limit (KAI reads an unset limit as zero) and a parent (KAI v0.12 schedules
    nothing from a top-level queue)."""
    return QueueGrant(
        name=naming.queue_name(name),
        quota=_kai_number(quota),
        limit=_kai_number(limit),
        over_quota_weight=spec.gpu.over_quota_weight,
        priority=spec.gpu.priority,
        parent=parent,
    )


def _kai_number(value: Fraction) -> float | int:
    """KAI Queue numbers: an int when whole (renders as ``8``, not ``8.0``), else the float."""
    return value.numerator if value.denominator == 1 else float(value)


def _pools_of(config: OperatorConfig, modes: tuple[SharingMode, ...]) -> list[Pool]:
    return [pool for pool in config.pools if registry.of_pool(pool).mode in modes]


def _pools_serving(config: OperatorConfig, trust: Trust, modes: tuple[SharingMode, ...]) -> list[Pool]:
    return [pool for pool in _pools_of(config, modes) if trust in pool.serves]


def _trusts(trusts: tuple[Trust, ...]) -> str:
    return "/".join(trust.value for trust in trusts)


def _list_pools(pools: list[Pool]) -> str:
    return ", ".join(f"{p.name} ({p.mode.value}, {p.gpu_model})" for p in pools) or "none"


def _model_clause(spec: GpuTenantSpec) -> str:
    return f" with gpu.model {spec.gpu.model}" if spec.gpu.model else ""
