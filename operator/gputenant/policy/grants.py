"""What each sharing mechanism grants on one pool, in its own units (docs/units.md): whole GPUs,
time-slice replicas, KAI GPU fractions (HAMi mode) or MIG instances. Pure, like the rest of the
policy; a request the mechanism cannot grant raises `Refused`, which `decide` turns into an
impossible Decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from gputenant.api import conditions as reasons
from gputenant.api.gpus import mig_layout, mig_profile
from gputenant.api.hub import GpuTenantSpec, HamiSpec
from gputenant.api.trust import SharingMode
from gputenant.api.trust import profile as trust_profile
from gputenant.config.pools import MigStrategy, Pool
from gputenant.policy.decision import PodRules

WHOLE_GPU = "nvidia.com/gpu"


class Refused(Exception):
    """Control flow inside the policy only: decide() turns it into an impossible Decision."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Grant:
    """What one mechanism grants on one pool, before it is wrapped into a Decision."""

    quota: dict[str, str]
    queue_quota: Fraction
    queue_limit: Fraction
    pod_rules: PodRules
    summary: str
    warnings: tuple[str, ...] = field(default=())


def _grant_exclusive(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
    gpus_quota = whole_units(quota_gpus, 1, "gpu.quota", f"Exclusive pool {pool.name}", "GPUs")
    gpus_limit = whole_units(limit_gpus, 1, "gpu.limit", f"Exclusive pool {pool.name}", "GPUs")
    return Grant(
        quota={f"requests.{WHOLE_GPU}": str(gpus_limit)},
        queue_quota=Fraction(gpus_quota),
        queue_limit=Fraction(gpus_limit),
        pod_rules=PodRules(
            gpu_resources=(WHOLE_GPU,),
            max_per_pod={WHOLE_GPU: gpus_limit},
            forbid_isolation_overrides=trust_profile(spec.trust).strict_guard,
        ),
        summary=f"{gpus_quota} whole GPUs guaranteed, up to {gpus_limit}",
    )


def _grant_time_slicing(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
    slicing = pool.time_slicing_settings()
    replicas = slicing.replicas
    resource = f"{WHOLE_GPU}.shared" if slicing.rename_by_default else WHOLE_GPU
    limit_replicas = whole_units(limit_gpus, replicas, "gpu.limit", f"TimeSlicing pool {pool.name}", "replicas")
    return Grant(
        quota={f"requests.{resource}": str(limit_replicas)},
        queue_quota=exact(quota_gpus) * replicas,
        queue_limit=Fraction(limit_replicas),
        pod_rules=PodRules(
            gpu_resources=(resource,),
            max_per_pod={resource: limit_replicas},
            max_per_container={resource: 1} if slicing.fail_requests_greater_than_one else {},
            allow_fraction_annotations=True,
            forbid_isolation_overrides=trust_profile(spec.trust).strict_guard,
        ),
        summary=f"up to {limit_replicas} time-slice replicas of {resource} ({replicas} per GPU, no memory or fault isolation)",
    )


def _grant_hami(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
    """HAMi mode is KAI GPU fractions (docs/units.md, "Why KAI fractions"): each share is a pod annotated
    ``gpu-fraction: c/100``, which KAI charges to the tenant's queue as c/100 of a GPU and places on a GPU
    it shares with at most 100/c such shares. Memory and compute caps are HAMi-core's, which the admission
    guard loads into each share (guard/hami_caps.py, as KAI >= v0.16's ``hamicore`` plugin would): the share's
    memory is its portion of the GPU, its SMs its percent.
    """
    hami = spec.sharing.hami or HamiSpec()
    cores = hami.core_percent
    share = Fraction(cores, 100)
    shares_per_gpu = 1 / share
    split_count = pool.hami_settings().split_count
    if shares_per_gpu > split_count:
        raise Refused(
            reasons.HAMI_SHARE_TOO_SMALL,
            f"sharing.hami.corePercent {cores} makes {show(shares_per_gpu)} shares per GPU, but pool {pool.name} splits a GPU "
            f"into at most {split_count} (hami.splitCount); raise corePercent to at least {math.ceil(100 / split_count)}",
        )
    if cores == 100:
        raise Refused(
            reasons.FRACTION_NOT_GRANTABLE,
            "sharing.hami.corePercent 100 is a whole GPU, and KAI GPU fractions are below one GPU; "
            "set corePercent to at most 50, or use sharing mode Exclusive",
        )
    share_memory = pool.gpu_memory_mi_b * cores // 100
    if hami.memory_mi_b is not None and hami.memory_mi_b > pool.gpu_memory_mi_b:
        raise Refused(
            reasons.MEMORY_ABOVE_GPU,
            f"sharing.hami.memoryMiB {hami.memory_mi_b} is more than one GPU of pool {pool.name} has "
            f"({pool.gpu_memory_mi_b} MiB); a share's memory is its portion of the GPU: unset memoryMiB",
        )
    if hami.memory_mi_b is not None and hami.memory_mi_b != share_memory:
        raise Refused(
            reasons.FRACTION_NOT_GRANTABLE,
            f"sharing.hami.memoryMiB {hami.memory_mi_b}: a share's memory is its fraction of the GPU (HAMi-core caps "
            f"a gpu-fraction at that portion), {share_memory} MiB for corePercent {cores} on pool {pool.name} "
            f"({pool.gpu_memory_mi_b} MiB per GPU); unset memoryMiB, or set corePercent to "
            f"{math.ceil(hami.memory_mi_b * 100 / pool.gpu_memory_mi_b)}",
        )
    whole_units(quota_gpus, shares_per_gpu, "gpu.quota", f"HAMi at corePercent {cores}", "shares")
    shares = whole_units(limit_gpus, shares_per_gpu, "gpu.limit", f"HAMi at corePercent {cores}", "shares")
    largest = min(exact(limit_gpus), (math.ceil(shares_per_gpu) - 1) * share)
    return Grant(
        quota={f"requests.{WHOLE_GPU}": "0"},
        queue_quota=exact(quota_gpus),
        queue_limit=exact(limit_gpus),
        pod_rules=PodRules(
            gpu_resources=(),
            allow_fraction_annotations=True,
            fraction_share=share,
            max_fraction=largest - largest % share,
            forbid_isolation_overrides=trust_profile(spec.trust).strict_guard,
        ),
        summary=(
            f"up to {shares} KAI GPU fractions of {show(share)} ({share_memory} MiB each), counted by the queue; "
            f"no whole GPUs"
        ),
    )


def _grant_mig(spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
    mig = pool.mig_settings()
    wanted = spec.sharing.mig.profile if spec.sharing.mig and spec.sharing.mig.profile else None
    profile_name = wanted or mig.default_profile or mig.profiles[0]
    profile = mig_profile(pool.gpu_model, profile_name)
    if profile is None:
        raise Refused(reasons.PROFILE_NOT_ON_GPU, f"MIG profile {profile_name} does not exist on {pool.gpu_model}")
    per_gpu = profile.max_instances
    unit = f"{profile.name} instances"
    instances_quota = whole_units(quota_gpus, per_gpu, "gpu.quota", f"MIG {profile.name} on {pool.gpu_model}", unit)
    instances_limit = whole_units(limit_gpus, per_gpu, "gpu.limit", f"MIG {profile.name} on {pool.gpu_model}", unit)
    layout = mig_layout(pool.gpu_model, mig.config)
    if pool.gpus is not None and layout is not None and instances_limit > pool.gpus * layout[profile.name]:
        raise Refused(
            reasons.QUOTA_ABOVE_POOL_CAPACITY,
            f"gpu.limit {limit_gpus} is {instances_limit} {unit}, but pool {pool.name} ({pool.gpus} GPUs, mig.config "
            f"{mig.config}) has only {pool.gpus * layout[profile.name]}; lower gpu.limit or pick another profile",
        )
    if mig.strategy is MigStrategy.SINGLE:
        resource, kai_units_per_instance = WHOLE_GPU, 1
    else:
        resource, kai_units_per_instance = profile.resource_name, profile.compute_slices
    return Grant(
        quota={f"requests.{resource}": str(instances_limit)},
        queue_quota=Fraction(instances_quota * kai_units_per_instance),
        queue_limit=Fraction(instances_limit * kai_units_per_instance),
        pod_rules=PodRules(
            gpu_resources=(resource,),
            max_per_pod={resource: instances_limit},
            forbid_isolation_overrides=trust_profile(spec.trust).strict_guard,
        ),
        summary=(
            f"{instances_quota} {unit} guaranteed, up to {instances_limit} ({per_gpu} per GPU, "
            f"requested as {resource}, mig strategy {mig.strategy.value})"
        ),
    )


GRANTERS = {
    SharingMode.EXCLUSIVE: _grant_exclusive,
    SharingMode.TIME_SLICING: _grant_time_slicing,
    SharingMode.HAMI: _grant_hami,
    SharingMode.MIG: _grant_mig,
}


def exact(value: float) -> Fraction:
    """The decimal the user wrote (0.1 is 1/10, not the binary float near it)."""
    return Fraction(str(value))




def whole_units(value: float, units_per_gpu: Fraction | int, field_name: str, mechanism: str, unit: str) -> int:
    """``value`` GPUs in the mechanism's units, which must come out whole.

    Whole when the written decimal times units_per_gpu is an integer, or when the value is the float
    closest to k/units_per_gpu (so 3/7 of a GPU, 0.42857142857142855, is 3 one-seventh instances).
    """
    scaled = exact(value) * units_per_gpu
    nearest = round(scaled)
    if scaled.denominator == 1 or float(Fraction(nearest) / units_per_gpu) == value:
        return nearest
    below = math.floor(scaled)
    raise Refused(
        reasons.FRACTION_NOT_GRANTABLE,
        f"{field_name} {value} is {show(scaled)} {unit}; {mechanism} grants only whole {unit} "
        f"({show(Fraction(units_per_gpu))} per GPU): set {field_name} to {_gpus_for(below, units_per_gpu)} "
        f"({below} {unit}) or {_gpus_for(below + 1, units_per_gpu)} ({below + 1} {unit})",
    )




def _gpus_for(units: int, units_per_gpu: Fraction | int) -> str:
    """The shortest float that means ``units`` of the mechanism, as a tenant would write it."""
    return repr(float(Fraction(units) / units_per_gpu)).removesuffix(".0")




def show(value: Fraction) -> str:
    """A Fraction for messages: ``8``, ``0.5`` or ``3.5``; repeating decimals as their float."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))
