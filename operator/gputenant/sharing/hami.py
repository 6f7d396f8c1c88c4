"""HAMi mode: KAI GPU fractions capped by HAMi-core (docs/units.md, "Why KAI fractions"). Each share
is a pod annotated ``gpu-fraction: c/100``, which KAI charges to the tenant's queue as c/100 of a GPU
and places on a GPU it shares with at most 100/c such shares. Memory and compute caps are
HAMi-core's, which the admission guard loads into each share (guard/hami_caps.py): the share's
memory is its portion of the GPU, its SMs its percent. Best effort, in the process: against
mistakes, not evasion."""

from __future__ import annotations

import math
from fractions import Fraction

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec, HamiSpec
from gputenant.api.trust import SharingMode
from gputenant.api.trust import profile as trust_profile
from gputenant.config.pools import Pool, PoolMode
from gputenant.sharing.base import WHOLE_GPU, Grant, Mechanism, PodRules, Promise, Refused, exact, show, whole_units

MEMORY_FLOOR = 0.99
"""HAMi-core answers cuDeviceTotalMem with the cap itself: the total must equal it (within 1%)."""


def share_caps(fraction: Fraction, pool: Pool) -> tuple[int, int]:
    """(memory MiB, SM percent) of a pod holding `fraction` of one of `pool`'s GPUs (rounded down, at least 1)."""
    return max(1, math.floor(pool.gpu_memory_mi_b * fraction)), max(1, math.floor(fraction * 100))


class Hami(Mechanism):
    mode = SharingMode.HAMI
    pool_mode = PoolMode.HAMI
    unit = "KAI GPU fractions"
    isolation = "memory and SMs, capped in the process (best effort)"
    spec_block = ("hami", "hami")
    caps_in_process = True

    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
        hami = spec.sharing.hami or HamiSpec()
        cores = hami.core_percent
        share = Fraction(cores, 100)
        shares_per_gpu = 1 / share
        split_count = pool.hami_settings().split_count
        if shares_per_gpu > split_count:
            raise Refused(
                reasons.HAMI_SHARE_TOO_SMALL,
                f"sharing.hami.corePercent {cores} makes {show(shares_per_gpu)} shares per GPU, but pool {pool.name} "
                f"splits a GPU into at most {split_count} (hami.splitCount); raise corePercent to at least "
                f"{math.ceil(100 / split_count)}",
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
                f"sharing.hami.memory {hami.memory_mi_b}Mi (memoryMiB: {hami.memory_mi_b}) is more than one GPU of pool "
                f"{pool.name} has ({pool.gpu_memory_mi_b} MiB); a share's memory is its portion of the GPU: unset it",
            )
        if hami.memory_mi_b is not None and hami.memory_mi_b != share_memory:
            raise Refused(
                reasons.FRACTION_NOT_GRANTABLE,
                f"sharing.hami.memory {hami.memory_mi_b}Mi (memoryMiB: {hami.memory_mi_b}): a share's memory is its fraction "
                f"of the GPU (HAMi-core caps a gpu-fraction at that portion), {share_memory} MiB for corePercent "
                f"{cores} on pool {pool.name} ({pool.gpu_memory_mi_b} MiB per GPU); unset it, or set corePercent to "
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

    def promise(self, pool: Pool) -> Promise:
        """One share of the default corePercent, asked for as the guard lets a tenant ask for it."""
        fraction = Fraction(HamiSpec().core_percent, 100)
        memory_mib, sm_percent = share_caps(fraction, pool)
        return Promise(pool.name, pool.mode.value, 1, memory_mib, MEMORY_FLOOR, False, {},
                       f"one KAI GPU fraction of {float(fraction):g}, capped by HAMi-core at {memory_mib} MiB "
                       f"and {sm_percent}% of the SMs (best effort, in the process: against mistakes, not evasion)",
                       annotations={naming.KAI_FRACTION_ANNOTATIONS[0]: f"{float(fraction):g}"},
                       compute_percent=sm_percent)
