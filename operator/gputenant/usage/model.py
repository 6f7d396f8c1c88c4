"""Held against used GPUs per tenant: pure judgement of DCGM series already read from Prometheus.

"Busy" comes from SM activity (DCGM_FI_PROF_SM_ACTIVE, the fraction of time the GPU's SMs had work),
never from GPU_UTIL alone: GPU_UTIL (and nvidia-smi's utilization.gpu) reads 100% while one block
spins on 1 of 132 SMs of an H100. So a GPU is *busy but not working* when GPU_UTIL says busy while
SM activity says the SMs mostly did nothing, and *idle* when its SM activity stayed below the idle
threshold over the window without GPU_UTIL claiming otherwise (docs/metrics.md, "Allocation
against use").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant import naming
from gputenant.config.models import OperatorConfig
from gputenant.metrics import UsageFigures
from gputenant.tables import align_columns

IDLE_SM_ACTIVE = 0.01
"""Mean SM activity below this over the window: the GPU did no work worth its allocation."""
BUSY_GPU_UTIL = 80.0
"""GPU_UTIL (percent) at or above this reads as "busy" in nvidia-smi and most dashboards."""
WORKING_SM_ACTIVE = 0.2
"""Mean SM activity below this while GPU_UTIL reads busy: a kernel is resident but the SMs are idle."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU a pod in a tenant namespace holds, averaged over the window."""

    namespace: str
    pod: str
    gpu: str
    """The GPU's identity: its UUID (else host and index)."""
    sm_active: float
    """Mean DCGM_FI_PROF_SM_ACTIVE over the window, 0..1."""
    gpu_util: float | None = None
    """Mean DCGM_FI_DEV_GPU_UTIL over the window, percent; None when not exported."""
    fb_used_mib: float | None = None


@dataclass
class TenantUsage:
    tenant: str
    namespace: str
    gpus_held: int = 0
    """GPUs (per pod) the tenant's pods held at some time in the window."""
    held_gpu_hours: float = 0.0
    """GPU-hours held over the window (each held GPU counts 1 per hour)."""
    used_gpu_hours: float = 0.0
    """GPU-hours of SM activity over the window (a GPU with SMs busy half the time counts 0.5 per hour)."""
    idle: list[GpuSample] = field(default_factory=list)
    busy_not_working: list[GpuSample] = field(default_factory=list)
    share_hours: dict[str, float] = field(default_factory=dict)
    """Pool -> GPU-hours held by share over the window (the operator's gputenant_tenant_gpu_shares)."""

    @property
    def use_ratio(self) -> float | None:
        """Used over held GPU-hours; None when nothing was held."""
        return self.used_gpu_hours / self.held_gpu_hours if self.held_gpu_hours else None


def is_idle(sample: GpuSample) -> bool:
    """SMs without work and GPU_UTIL not claiming otherwise (that is `is_busy_but_not_working`)."""
    return sample.sm_active < IDLE_SM_ACTIVE and not is_busy_but_not_working(sample)


def is_busy_but_not_working(sample: GpuSample) -> bool:
    """High GPU_UTIL with low SM activity; an idle GPU (GPU_UTIL low too) is not this."""
    return sample.gpu_util is not None and sample.gpu_util >= BUSY_GPU_UTIL and sample.sm_active < WORKING_SM_ACTIVE


def judge_usage(namespaces: dict[str, str], samples: list[GpuSample], held_hours: dict[str, float],
                used_hours: dict[str, float]) -> list[TenantUsage]:
    """Per tenant (`namespaces`: tenant -> host namespace), sorted by name: its GPUs, GPU-hours held
    and used (by namespace, from Prometheus), its idle GPUs and those busy but not working. Series
    of namespaces that belong to no tenant are ignored."""
    usage = {namespace: TenantUsage(tenant, namespace) for tenant, namespace in namespaces.items()}
    for sample in samples:
        tenant = usage.get(sample.namespace)
        if tenant is None:
            continue
        tenant.gpus_held += 1
        if is_idle(sample):
            tenant.idle.append(sample)
        elif is_busy_but_not_working(sample):
            tenant.busy_not_working.append(sample)
    for namespace, tenant in usage.items():
        tenant.held_gpu_hours = held_hours.get(namespace, 0.0)
        tenant.used_gpu_hours = used_hours.get(namespace, 0.0)
    return sorted(usage.values(), key=lambda tenant: tenant.tenant)


def tenant_namespaces(tenants: list[dict], config: OperatorConfig) -> dict[str, str]:
    """Tenant -> host namespace, from GpuTenant objects (status.namespace, else the configured prefix)."""
    return {t["metadata"]["name"]: (t.get("status") or {}).get("namespace")
            or naming.host_namespace(t["metadata"]["name"], config) for t in tenants}


def usage_figures(usage: list[TenantUsage]) -> list[UsageFigures]:
    """The usage as the operator's metrics publish it."""
    return [UsageFigures(tenant=u.tenant, gpus=u.gpus_held, held_gpu_hours=u.held_gpu_hours,
                         used_gpu_hours=u.used_gpu_hours, idle_gpus=len(u.idle),
                         busy_not_working_gpus=len(u.busy_not_working)) for u in usage]


def _gpus(samples: list[GpuSample]) -> str:
    return ",".join(f"{s.pod}/{s.gpu}" for s in samples) or "-"


def format_usage_table(usage: list[TenantUsage]) -> str:
    header = ("TENANT", "NAMESPACE", "GPUS", "HELD-GPU-H", "USED-GPU-H", "USE", "IDLE", "BUSY-NOT-WORKING")
    rows = [header] + [(
        u.tenant, u.namespace, str(u.gpus_held), f"{u.held_gpu_hours:.2f}", f"{u.used_gpu_hours:.2f}",
        "-" if u.use_ratio is None else f"{u.use_ratio:.0%}", _gpus(u.idle), _gpus(u.busy_not_working),
    ) for u in usage]
    return align_columns(rows)
