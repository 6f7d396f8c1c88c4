"""The trust-based GPU-sharing policy: which mechanism and pool a tenant gets, and how much, in each
mechanism's own units (docs/units.md). Pure: no IO, no clock, and no exceptions for bad requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.v1alpha1 import GpuTenantSpec, HamiSpec, SharingMode, Trust
from gputenant.config.models import MigStrategy, OperatorConfig, Pool
from gputenant.policy.decision import Decision, PodRules, QueueGrant
from gputenant.policy.gpus import MIG_PROFILES, mig_layout, mig_profile
from gputenant.policy.trust import allowed_modes, names, stronger_or_equal
from gputenant.quantities import parse_quantity

WHOLE_GPU = "nvidia.com/gpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
SPEC_BLOCKS = {
    SharingMode.TIME_SLICING: ("timeSlicing", "time_slicing"),
    SharingMode.HAMI: ("hami", "hami"),
    SharingMode.MIG: ("mig", "mig"),
}
"""Mode -> its parameter block in spec.sharing (wire name, attribute)."""


class _Refused(Exception):
    """Internal control flow only: decide() turns it into an impossible Decision."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class _Grant:
    """What one mechanism grants on one pool, before it is wrapped into a Decision."""

    quota: dict[str, str]
    queue_quota: Fraction
    queue_limit: Fraction
    pod_rules: PodRules
    summary: str
    warnings: tuple[str, ...] = field(default=())


def decide(name: str, spec: GpuTenantSpec, config: OperatorConfig) -> Decision:
    """Choose mechanism and pool for tenant ``name`` and size its grant; never raises for a bad request."""
    try:
        return _decide(name, spec, config)
    except _Refused as refused:
        return Decision(trust=spec.trust, possible=False, reason=refused.reason, message=refused.message)


def _decide(name: str, spec: GpuTenantSpec, config: OperatorConfig) -> Decision:
    trust = spec.trust
    auto = spec.sharing.mode is SharingMode.AUTO
    mode = _requested_mode(spec, config)
    quota_gpus = spec.gpu.quota
    limit_gpus = spec.gpu.limit if spec.gpu.limit is not None else quota_gpus
    quota, limit = _exact(quota_gpus), _exact(limit_gpus)
    if limit < quota:
        raise _Refused(
            reasons.LIMIT_BELOW_QUOTA,
            f"gpu.limit {_show(limit)} is below gpu.quota {_show(quota)}; raise gpu.limit to at least {_show(quota)} or leave it unset",
        )
    _check_control_plane_fits(spec)
    if limit == 0:
        return _no_gpus(name, spec)

    effective_mode, pool = _choose_pool(spec, mode, auto, config)
    if pool.gpus is not None and limit > pool.gpus:
        raise _Refused(
            reasons.QUOTA_ABOVE_POOL_CAPACITY,
            f"gpu.limit {_show(limit)} is above the {pool.gpus} GPUs of pool {pool.name}; lower gpu.limit to at most {pool.gpus}",
        )
    grant = _GRANTERS[effective_mode](spec, pool, quota_gpus, limit_gpus)

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
        f"sharing.{block} is ignored: the tenant's GPUs are shared by {effective_mode.value}"
        for block_mode, (block, attribute) in SPEC_BLOCKS.items()
        if block_mode is not effective_mode and getattr(spec.sharing, attribute) is not None
    )
    return Decision(
        trust=trust,
        possible=True,
        reason=reason,
        message=f"{why}; pool {pool.name} ({pool.gpu_model}): {grant.summary}",
        mode=effective_mode,
        pool=pool,
        quota=grant.quota,
        queue=_queue(name, spec, grant.queue_quota, grant.queue_limit),
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
            raise _Refused(
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
            raise _Refused(
                reasons.MODE_NOT_ALLOWED_FOR_TRUST,
                f"sharing.mode {spec.sharing.mode.value} isolates {trust.value} tenants too weakly; "
                f"set sharing.mode to {names(allowed)} or Auto",
            )
        return spec.sharing.mode
    mode = config.trust_modes.get(trust)
    if mode not in allowed:
        shown = mode.value if mode else "nothing"
        raise _Refused(
            reasons.MODE_NOT_ALLOWED_FOR_TRUST,
            f"the operator config maps Auto for {trust.value} tenants to {shown}, which {trust.value} tenants may not use; "
            f"the platform team must set trustModes.{trust.value} to {names(allowed)} (or set sharing.mode explicitly)",
        )
    return mode


def _no_gpus(name: str, spec: GpuTenantSpec) -> Decision:
    """gpu.limit 0: no pool needed; the quota and the guard keep every GPU resource out."""
    return Decision(
        trust=spec.trust,
        possible=True,
        reason=reasons.NO_GPU_REQUESTED,
        message="gpu.quota and gpu.limit are 0: the tenant's pods may not use GPUs; raise gpu.quota to grant some",
        quota={f"requests.{WHOLE_GPU}": "0"},
        queue=_queue(name, spec, Fraction(0), Fraction(0)),
        pod_rules=PodRules(gpu_resources=(), forbid_isolation_overrides=spec.trust is not Trust.TRUSTED),
    )


def _choose_pool(spec: GpuTenantSpec, mode: SharingMode, auto: bool, config: OperatorConfig) -> tuple[SharingMode, Pool]:
    """spec.gpu.pool if it serves the mode, else the first fitting pool; Auto may move to a stronger mode."""
    candidates = stronger_or_equal(mode) if auto else (mode,)
    if spec.gpu.pool is not None:
        pool = config.pool(spec.gpu.pool)
        if pool is None:
            raise _Refused(
                reasons.POOL_NOT_FOUND,
                f"gpu.pool {spec.gpu.pool} is not in the operator config; use one of: {_list_pools(config.pools)}, or leave gpu.pool unset",
            )
        pool_mode = SharingMode(pool.mode.value)
        if pool_mode not in candidates:
            raise _Refused(
                reasons.POOL_MODE_MISMATCH,
                f"gpu.pool {pool.name} is a {pool_mode.value} pool, but this tenant needs {names(candidates)}; "
                f"pick a pool of {names(candidates)} ({_list_pools(_pools_of(config, candidates))})",
            )
        refusal = _misfit(spec, pool_mode, pool)
        if refusal:
            raise refusal
        return pool_mode, pool

    for candidate in candidates:
        pools = [p for p in _pools_of(config, (candidate,)) if spec.gpu.model in (None, p.gpu_model)]
        if pools:
            break
    else:
        raise _Refused(
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


def _misfit(spec: GpuTenantSpec, mode: SharingMode, pool: Pool) -> Optional[_Refused]:
    """Why the pool cannot serve the tenant's model, replicas or MIG profile; None when it can."""
    if spec.gpu.model is not None and pool.gpu_model != spec.gpu.model:
        return _Refused(
            reasons.POOL_MODEL_MISMATCH,
            f"gpu.pool {pool.name} has {pool.gpu_model} GPUs, not gpu.model {spec.gpu.model}; change or unset one of them",
        )
    wanted_replicas = spec.sharing.time_slicing.replicas if spec.sharing.time_slicing else None
    if mode is SharingMode.TIME_SLICING and wanted_replicas is not None and pool.time_slicing.replicas != wanted_replicas:
        return _Refused(
            reasons.NO_POOL_FOR_MODE,
            f"pool {pool.name} slices each GPU {pool.time_slicing.replicas} ways, not sharing.timeSlicing.replicas "
            f"{wanted_replicas}; set replicas to {pool.time_slicing.replicas} or leave it unset",
        )
    wanted_profile = spec.sharing.mig.profile if spec.sharing.mig else None
    if mode is SharingMode.MIG and wanted_profile is not None:
        if mig_profile(pool.gpu_model, wanted_profile) is None:
            offered = ", ".join(p.name for p in MIG_PROFILES.get(pool.gpu_model, ()))
            return _Refused(
                reasons.PROFILE_NOT_ON_GPU,
                f"sharing.mig.profile {wanted_profile} does not exist on {pool.gpu_model}; {pool.gpu_model} offers {offered}",
            )
        if wanted_profile not in pool.mig.profiles:
            return _Refused(
                reasons.PROFILE_NOT_IN_POOL,
                f"pool {pool.name} (mig.config {pool.mig.config}) offers {', '.join(pool.mig.profiles)}, not "
                f"sharing.mig.profile {wanted_profile}; pick one of those or leave the profile unset",
            )
    return None


def _pools_refusal(spec: GpuTenantSpec, mode: SharingMode, pools: list[Pool], refusals: list[_Refused]) -> _Refused:
    """No pool of the mode fits: a profile some GPU has beats one no GPU has, which beats the rest."""
    listed = "; ".join(dict.fromkeys(refusal.message for refusal in refusals))
    for reason in (reasons.PROFILE_NOT_IN_POOL, reasons.PROFILE_NOT_ON_GPU):
        if any(refusal.reason == reason for refusal in refusals):
            return _Refused(reason, f"no {mode.value} pool fits: {listed}")
    return _Refused(reasons.NO_POOL_FOR_MODE, f"no {mode.value} pool{_model_clause(spec)} fits: {listed}")


def _grant_exclusive(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> _Grant:
    gpus_quota = _whole_units(quota_gpus, 1, "gpu.quota", f"Exclusive pool {pool.name}", "GPUs")
    gpus_limit = _whole_units(limit_gpus, 1, "gpu.limit", f"Exclusive pool {pool.name}", "GPUs")
    return _Grant(
        quota={f"requests.{WHOLE_GPU}": str(gpus_limit)},
        queue_quota=Fraction(gpus_quota),
        queue_limit=Fraction(gpus_limit),
        pod_rules=PodRules(
            gpu_resources=(WHOLE_GPU,),
            max_per_pod={WHOLE_GPU: gpus_limit},
            forbid_isolation_overrides=spec.trust is not Trust.TRUSTED,
        ),
        summary=f"{gpus_quota} whole GPUs guaranteed, up to {gpus_limit}",
    )


def _grant_time_slicing(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> _Grant:
    slicing = pool.time_slicing
    replicas = slicing.replicas
    resource = f"{WHOLE_GPU}.shared" if slicing.rename_by_default else WHOLE_GPU
    limit_replicas = _whole_units(limit_gpus, replicas, "gpu.limit", f"TimeSlicing pool {pool.name}", "replicas")
    return _Grant(
        quota={f"requests.{resource}": str(limit_replicas)},
        queue_quota=_exact(quota_gpus) * replicas,
        queue_limit=Fraction(limit_replicas),
        pod_rules=PodRules(
            gpu_resources=(resource,),
            max_per_pod={resource: limit_replicas},
            max_per_container={resource: 1} if slicing.fail_requests_greater_than_one else {},
            allow_fraction_annotations=True,
            forbid_isolation_overrides=spec.trust is not Trust.TRUSTED,
        ),
        summary=f"up to {limit_replicas} time-slice replicas of {resource} ({replicas} per GPU, no memory or fault isolation)",
    )


def _grant_hami(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> _Grant:
    hami = spec.sharing.hami or HamiSpec()
    cores = hami.core_percent
    shares_per_gpu = Fraction(100, cores)
    if shares_per_gpu > pool.hami.split_count:
        raise _Refused(
            reasons.HAMI_SHARE_TOO_SMALL,
            f"sharing.hami.corePercent {cores} makes {_show(shares_per_gpu)} shares per GPU, but pool {pool.name} splits a GPU "
            f"into at most {pool.hami.split_count} (hami.splitCount); raise corePercent to at least {math.ceil(100 / pool.hami.split_count)}",
        )
    memory = hami.memory_mi_b if hami.memory_mi_b is not None else pool.gpu_memory_mi_b * cores // 100
    if memory > pool.gpu_memory_mi_b:
        raise _Refused(
            reasons.MEMORY_ABOVE_GPU,
            f"sharing.hami.memoryMiB {memory} is more than one GPU of pool {pool.name} has ({pool.gpu_memory_mi_b} MiB); "
            f"lower memoryMiB to at most {pool.gpu_memory_mi_b}",
        )
    shares = _whole_units(limit_gpus, shares_per_gpu, "gpu.limit", f"HAMi at corePercent {cores}", "shares")
    cores_total = shares * cores
    warnings = ()
    fitting = min(math.floor(shares_per_gpu), pool.hami.split_count)
    if fitting * memory > pool.gpu_memory_mi_b:
        warnings = (
            f"{fitting} shares of {memory} MiB do not fit in one {pool.gpu_memory_mi_b} MiB GPU of pool {pool.name}: "
            f"the tenant's shares will spread over more GPUs than gpu.limit suggests",
        )
    return _Grant(
        quota={
            f"requests.{WHOLE_GPU}": str(shares),
            f"limits.{HAMI_MEMORY}": str(shares * memory),
            f"limits.{HAMI_CORES}": str(cores_total),
        },
        queue_quota=_exact(quota_gpus),
        queue_limit=_exact(limit_gpus),
        pod_rules=PodRules(
            gpu_resources=(WHOLE_GPU, HAMI_MEMORY, HAMI_CORES),
            max_per_pod={WHOLE_GPU: shares, HAMI_MEMORY: shares * memory, HAMI_CORES: cores_total},
            max_per_container={HAMI_MEMORY: pool.gpu_memory_mi_b, HAMI_CORES: 100},
            default_limits={HAMI_MEMORY: str(memory), HAMI_CORES: str(cores)},
            forbid_isolation_overrides=spec.trust is not Trust.TRUSTED,
        ),
        summary=f"up to {shares} vGPU shares of {cores}% compute and {memory} MiB each",
        warnings=warnings,
    )


def _grant_mig(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> _Grant:
    mig = pool.mig
    wanted = spec.sharing.mig.profile if spec.sharing.mig and spec.sharing.mig.profile else None
    profile = mig_profile(pool.gpu_model, wanted or mig.default_profile or mig.profiles[0])
    per_gpu = profile.max_instances
    unit = f"{profile.name} instances"
    instances_quota = _whole_units(quota_gpus, per_gpu, "gpu.quota", f"MIG {profile.name} on {pool.gpu_model}", unit)
    instances_limit = _whole_units(limit_gpus, per_gpu, "gpu.limit", f"MIG {profile.name} on {pool.gpu_model}", unit)
    layout = mig_layout(pool.gpu_model, mig.config)
    if pool.gpus is not None and layout is not None and instances_limit > pool.gpus * layout[profile.name]:
        raise _Refused(
            reasons.QUOTA_ABOVE_POOL_CAPACITY,
            f"gpu.limit {limit_gpus} is {instances_limit} {unit}, but pool {pool.name} ({pool.gpus} GPUs, mig.config "
            f"{mig.config}) has only {pool.gpus * layout[profile.name]}; lower gpu.limit or pick another profile",
        )
    if mig.strategy is MigStrategy.SINGLE:
        resource, kai_units_per_instance = WHOLE_GPU, 1
    else:
        resource, kai_units_per_instance = profile.resource_name, profile.compute_slices
    return _Grant(
        quota={f"requests.{resource}": str(instances_limit)},
        queue_quota=Fraction(instances_quota * kai_units_per_instance),
        queue_limit=Fraction(instances_limit * kai_units_per_instance),
        pod_rules=PodRules(
            gpu_resources=(resource,),
            max_per_pod={resource: instances_limit},
            forbid_isolation_overrides=spec.trust is not Trust.TRUSTED,
        ),
        summary=(
            f"{instances_quota} {unit} guaranteed, up to {instances_limit} ({per_gpu} per GPU, "
            f"requested as {resource}, mig strategy {mig.strategy.value})"
        ),
    )


_GRANTERS = {
    SharingMode.EXCLUSIVE: _grant_exclusive,
    SharingMode.TIME_SLICING: _grant_time_slicing,
    SharingMode.HAMI: _grant_hami,
    SharingMode.MIG: _grant_mig,
}


def _queue(name: str, spec: GpuTenantSpec, quota: Fraction, limit: Fraction) -> QueueGrant:
    """Always with an explicit limit: KAI reads an unset limit as zero."""
    return QueueGrant(
        name=naming.queue_name(name),
        quota=_kai_number(quota),
        limit=_kai_number(limit),
        over_quota_weight=spec.gpu.over_quota_weight,
        priority=spec.gpu.priority,
        parent=spec.gpu.parent_queue,
    )


def _exact(value: float) -> Fraction:
    """The decimal the user wrote (0.1 is 1/10, not the binary float near it)."""
    return Fraction(str(value))


def _whole_units(value: float, units_per_gpu: Fraction | int, field_name: str, mechanism: str, unit: str) -> int:
    """``value`` GPUs in the mechanism's units, which must come out whole.

    Whole when the written decimal times units_per_gpu is an integer, or when the value is the float
    closest to k/units_per_gpu (so 3/7 of a GPU, 0.42857142857142855, is 3 one-seventh instances).
    """
    scaled = _exact(value) * units_per_gpu
    nearest = round(scaled)
    if scaled.denominator == 1 or float(Fraction(nearest) / units_per_gpu) == value:
        return nearest
    below = math.floor(scaled)
    raise _Refused(
        reasons.FRACTION_NOT_GRANTABLE,
        f"{field_name} {value} is {_show(scaled)} {unit}; {mechanism} grants only whole {unit} "
        f"({_show(Fraction(units_per_gpu))} per GPU): set {field_name} to {_gpus_for(below, units_per_gpu)} "
        f"({below} {unit}) or {_gpus_for(below + 1, units_per_gpu)} ({below + 1} {unit})",
    )


def _gpus_for(units: int, units_per_gpu: Fraction | int) -> str:
    """The shortest float that means ``units`` of the mechanism, as a tenant would write it."""
    return repr(float(Fraction(units) / units_per_gpu)).removesuffix(".0")


def _kai_number(value: Fraction) -> float | int:
    """KAI Queue numbers: an int when whole (renders as ``8``, not ``8.0``), else the float."""
    return value.numerator if value.denominator == 1 else float(value)


def _show(value: Fraction) -> str:
    """A Fraction for messages: ``8``, ``0.5`` or ``3.5``; repeating decimals as their float."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


def _pools_of(config: OperatorConfig, modes: tuple[SharingMode, ...]) -> list[Pool]:
    return [pool for pool in config.pools if SharingMode(pool.mode.value) in modes]


def _list_pools(pools: list[Pool]) -> str:
    return ", ".join(f"{p.name} ({p.mode.value}, {p.gpu_model})" for p in pools) or "none"


def _model_clause(spec: GpuTenantSpec) -> str:
    return f" with gpu.model {spec.gpu.model}" if spec.gpu.model else ""
