"""Whole GPUs: nothing is shared, so nothing can leak between tenants through the GPU."""

from __future__ import annotations

from fractions import Fraction

from gputenant.api.hub import GpuTenantSpec
from gputenant.api.trust import SharingMode
from gputenant.api.trust import profile as trust_profile
from gputenant.config.pools import Pool, PoolMode
from gputenant.sharing.base import WHOLE_GPU, Grant, Mechanism, PodRules, Promise, whole_units


class Exclusive(Mechanism):
    mode = SharingMode.EXCLUSIVE
    pool_mode = PoolMode.EXCLUSIVE
    unit = "whole GPUs"
    isolation = "everything: no other pod on the GPU"

    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
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

    def promise(self, pool: Pool) -> Promise:
        whole = pool.gpu_memory_mi_b
        return Promise(pool.name, pool.mode.value, 1, whole, 0.9, True, {WHOLE_GPU: "1"},
                       f"one whole GPU of {whole} MiB, no other pod on it")
