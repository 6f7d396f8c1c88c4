"""NVIDIA device-plugin time-slicing: each GPU advertised as N replicas that take turns. It isolates
nothing (no memory limit, no fault isolation), so only Trusted tenants may use it."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec
from gputenant.api.trust import SharingMode
from gputenant.api.trust import profile as trust_profile
from gputenant.config.pools import Pool, PoolMode
from gputenant.sharing.base import WHOLE_GPU, Grant, Mechanism, PodRules, Promise, Refused, exact, whole_units

DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"


def device_plugin_config_name(pool: Pool) -> str:
    """The named device-plugin config (ConfigMap key and node label value) of a time-slicing pool."""
    return pool.device_plugin_config or pool.name


def shared_resource(pool: Pool) -> str:
    """The resource a replica is requested as: ``nvidia.com/gpu.shared`` where the device plugin renames it."""
    return f"{WHOLE_GPU}.shared" if pool.time_slicing_settings().rename_by_default else WHOLE_GPU


class TimeSlicing(Mechanism):
    mode = SharingMode.TIME_SLICING
    pool_mode = PoolMode.TIME_SLICING
    unit = "time-slice replicas"
    isolation = "nothing: turn-taking, memory and faults shared"
    spec_block = ("timeSlicing", "time_slicing")
    per_container_why = " (time-sliced replicas add no compute; the pool fails larger requests)"

    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
        slicing = pool.time_slicing_settings()
        replicas = slicing.replicas
        resource = shared_resource(pool)
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
            summary=(f"up to {limit_replicas} time-slice replicas of {resource} ({replicas} per GPU, no memory or "
                     "fault isolation)"),
        )

    def misfit(self, spec: GpuTenantSpec, pool: Pool) -> Refused | None:
        wanted = spec.sharing.time_slicing.replicas if spec.sharing.time_slicing else None
        replicas = pool.time_slicing_settings().replicas
        if wanted is not None and replicas != wanted:
            return Refused(
                reasons.NO_POOL_FOR_MODE,
                f"pool {pool.name} slices each GPU {replicas} ways, not sharing.timeSlicing.replicas "
                f"{wanted}; set replicas to {replicas} or leave it unset",
            )
        return None

    def node_labels(self, pool: Pool) -> dict[str, str]:
        return {DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config_name(pool)}

    def device_plugin_config(self, pool: Pool) -> dict:
        """The device-plugin config file (``version: v1``) that advertises each GPU as its replicas."""
        settings = pool.time_slicing_settings()
        return {
            "version": "v1",
            "flags": {"migStrategy": "none"},
            "sharing": {"timeSlicing": {
                "renameByDefault": settings.rename_by_default,
                "failRequestsGreaterThanOne": settings.fail_requests_greater_than_one,
                "resources": [{"name": WHOLE_GPU, "replicas": settings.replicas}],
            }},
        }

    def whole_resource_share(self, pool: Pool, amount: Decimal) -> Decimal:
        """A replica is 1/replicas of its GPU."""
        return amount / pool.time_slicing_settings().replicas

    def promise(self, pool: Pool) -> Promise:
        whole = pool.gpu_memory_mi_b
        return Promise(pool.name, pool.mode.value, 1, whole, 0.9, False, {shared_resource(pool): "1"},
                       f"one time-slice of a {whole} MiB GPU, memory shared with the other slices", capped=False)
