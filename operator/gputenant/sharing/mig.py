"""MIG: each GPU partitioned in hardware into instances of a profile (memory, caches and SMs of
their own), requested as ``nvidia.com/mig-<profile>`` (mixed strategy) or ``nvidia.com/gpu``
(single strategy)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from gputenant.api import conditions as reasons
from gputenant.api.gpus import MIG_PROFILES, mig_layout, mig_profile
from gputenant.api.hub import GpuTenantSpec
from gputenant.api.trust import SharingMode
from gputenant.api.trust import profile as trust_profile
from gputenant.config.pools import MigStrategy, Pool, PoolMode
from gputenant.sharing.base import WHOLE_GPU, Grant, Mechanism, PodRules, Promise, Refused, whole_units

MIB_PER_GB = 1024
PROFILE_PREFIX = "nvidia.com/mig-"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def instance_share(pool: Pool, profile: str, amount: Decimal) -> Decimal:
    """Physical GPUs held by `amount` instances of `profile`: 1/n each, n instances making one GPU."""
    found = mig_profile(pool.gpu_model, profile)
    return amount / found.max_instances if found else Decimal(0)


class Mig(Mechanism):
    mode = SharingMode.MIG
    pool_mode = PoolMode.MIG
    unit = "MIG instances"
    isolation = "memory, caches, SMs and faults, in hardware"
    spec_block = ("mig", "mig")
    profile_resource_prefix = PROFILE_PREFIX

    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
        mig = pool.mig_settings()
        wanted = spec.sharing.mig.profile if spec.sharing.mig and spec.sharing.mig.profile else None
        profile_name = wanted or mig.default_profile or mig.profiles[0]
        profile = mig_profile(pool.gpu_model, profile_name)
        if profile is None:
            raise Refused(reasons.PROFILE_NOT_ON_GPU, f"MIG profile {profile_name} does not exist on {pool.gpu_model}")
        per_gpu = profile.max_instances
        unit = f"{profile.name} instances"
        mechanism = f"MIG {profile.name} on {pool.gpu_model}"
        instances_quota = whole_units(quota_gpus, per_gpu, "gpu.quota", mechanism, unit)
        instances_limit = whole_units(limit_gpus, per_gpu, "gpu.limit", mechanism, unit)
        layout = mig_layout(pool.gpu_model, mig.config)
        if pool.gpus is not None and layout is not None and instances_limit > pool.gpus * layout[profile.name]:
            raise Refused(
                reasons.QUOTA_ABOVE_POOL_CAPACITY,
                f"gpu.limit {limit_gpus} is {instances_limit} {unit}, but pool {pool.name} ({pool.gpus} GPUs, "
                f"mig.config {mig.config}) has only {pool.gpus * layout[profile.name]}; lower gpu.limit or pick "
                "another profile",
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

    def misfit(self, spec: GpuTenantSpec, pool: Pool) -> Refused | None:
        wanted = spec.sharing.mig.profile if spec.sharing.mig else None
        if wanted is None:
            return None
        if mig_profile(pool.gpu_model, wanted) is None:
            offered = ", ".join(p.name for p in MIG_PROFILES.get(pool.gpu_model, ()))
            return Refused(
                reasons.PROFILE_NOT_ON_GPU,
                f"sharing.mig.profile {wanted} does not exist on {pool.gpu_model}; {pool.gpu_model} offers {offered}",
            )
        mig = pool.mig_settings()
        if wanted not in mig.profiles:
            return Refused(
                reasons.PROFILE_NOT_IN_POOL,
                f"pool {pool.name} (mig.config {mig.config}) offers {', '.join(mig.profiles)}, not "
                f"sharing.mig.profile {wanted}; pick one of those or leave the profile unset",
            )
        return None

    def node_labels(self, pool: Pool) -> dict[str, str]:
        """mig-parted's layout of every GPU on the node."""
        return {MIG_CONFIG_LABEL: pool.mig_settings().config}

    def whole_resource_share(self, pool: Pool, amount: Decimal) -> Decimal:
        """Single strategy: ``nvidia.com/gpu`` is an instance of the default profile."""
        mig = pool.mig_settings()
        if mig.strategy is not MigStrategy.SINGLE:
            return amount
        return instance_share(pool, mig.default_profile or mig.profiles[0], amount)

    def promise(self, pool: Pool) -> Promise:
        """One instance of the pool's default profile."""
        mig = pool.mig_settings()
        name = mig.default_profile or mig.profiles[0]
        profile = mig_profile(pool.gpu_model, name)
        memory = profile.memory_gb * MIB_PER_GB if profile else pool.gpu_memory_mi_b
        resource = WHOLE_GPU if mig.strategy is MigStrategy.SINGLE else f"{PROFILE_PREFIX}{name}"
        return Promise(pool.name, pool.mode.value, 1, memory, 0.9, True, {resource: "1"},
                       f"one MIG {name} instance of at most {memory} MiB, isolated in hardware")
