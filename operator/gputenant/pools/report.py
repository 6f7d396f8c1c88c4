"""Per-pool capacity report: nodes, GPUs, what tenants are guaranteed, over-commitment.

Guarantees (GpuTenant ``spec.gpu.quota``, once the policy granted it) are what KAI-Scheduler
promises each queue; a pool whose guarantees add up to more than its GPUs cannot keep them all,
which this report makes visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant.config.models import OperatorConfig
from gputenant.metrics import PoolFigures, pool_exposition
from gputenant.pools.hami_library import library_deliveries
from gputenant.pools.kai_version import kai_version_problems
from gputenant.pools.plan import node_gpus, node_name, pool_nodes
from gputenant.tables import align_columns
from gputenant.usage.sentinel import UnheldMemory


@dataclass(frozen=True)
class TenantGrant:
    """What one tenant holds in one pool, in GPUs."""

    tenant: str
    pool: str
    quota: float
    limit: float


@dataclass
class PoolReport:
    name: str
    mode: str
    nodes: list[str]
    node_gpus: int
    """Physical GPUs on the pool's nodes (nvidia.com/gpu.count labels)."""
    configured_gpus: int | None
    """``pools[].gpus`` from the operator config, if set."""
    granted: float
    """Sum of the tenants' guaranteed GPUs (quota)."""
    burst: float
    """Sum of the tenants' GPU limits."""
    tenants: list[str] = field(default_factory=list)
    isolation: dict | None = None
    """The pool's isolation attestation (IsolationVerified, reason, message, numbers), when the
    operator runs canaries (docs/attestation.md)."""
    unheld_memory: list[UnheldMemory] = field(default_factory=list)
    """GPU memory on the pool's nodes held by no one (pools/memory_sentinel.py)."""
    problems: list[str] = field(default_factory=list)
    """What keeps the pool from serving as configured, each starting with its name and naming the fix
    (``pools.leaks``: UnexplainedReservation; ``pools.hami_library``: HamiCoreLibraryNotDelivered;
    ``pools.kai_version``: KaiVersionUnsupported)."""

    @property
    def capacity(self) -> int:
        """GPUs the pool can promise: the configured count, else what its nodes have."""
        return self.configured_gpus if self.configured_gpus is not None else self.node_gpus

    @property
    def overcommit(self) -> float | None:
        """Guaranteed GPUs per GPU (above 1.0: promises the pool cannot keep); None without GPUs."""
        return self.granted / self.capacity if self.capacity else None


def grants_from_tenants(tenants: list[dict]) -> list[TenantGrant]:
    """Grants from GpuTenant objects: what the policy granted, never what the spec asked.

    The operator writes ``status.sharing.pool`` only when the policy chose a pool (and applied the
    tenant's quota and queue); a tenant it refused (``PoolModeMismatch``, ``NoPoolForMode``, ...)
    or has not reconciled yet holds nothing, whatever ``spec.gpu.pool`` says. The GPU amounts are
    the spec's only while the status describes that spec (``observedGeneration``): a spec changed
    since could ask for more than the policy has granted so far.
    """
    grants = []
    for tenant in tenants:
        status = tenant.get("status") or {}
        pool = (status.get("sharing") or {}).get("pool")
        if not pool or status.get("observedGeneration") != tenant["metadata"].get("generation"):
            continue
        spec_gpu = (tenant.get("spec") or {}).get("gpu") or {}
        quota = float(spec_gpu.get("quota") or 0)
        limit = spec_gpu.get("limit")
        grants.append(TenantGrant(tenant=tenant["metadata"]["name"], pool=pool, quota=quota,
                            limit=float(limit) if limit is not None else quota))
    return grants


def pool_reports(config: OperatorConfig, nodes: list[dict], grants: list[TenantGrant],
                 pods: list[dict] | None = None, kai_config: dict | None = None) -> list[PoolReport]:
    """`pods`: the GPU pods of tenants (the guard's queue label), for the problems read from them;
    `kai_config`: KAI's Config ``kai-config``, whose version problems every pool reports."""
    problems: dict[str, list[str]] = {pool.name: kai_version_problems(kai_config) for pool in config.pools}
    for delivery in library_deliveries(config, pods or []):
        if delivery.problem:
            problems.setdefault(delivery.pool, []).append(delivery.problem)
    reports = []
    for pool in config.pools:
        members = pool_nodes(pool, nodes)
        mine = [g for g in grants if g.pool == pool.name]
        reports.append(PoolReport(
            name=pool.name, mode=pool.mode.value, nodes=sorted(node_name(n) for n in members),
            node_gpus=sum(node_gpus(n) for n in members), configured_gpus=pool.gpus,
            granted=sum(g.quota for g in mine), burst=sum(g.limit for g in mine),
            tenants=sorted(g.tenant for g in mine), problems=problems.get(pool.name, [])))
    return reports


def _number(value: float) -> str:
    return f"{value:g}"


def format_table(reports: list[PoolReport]) -> str:
    header = ("POOL", "MODE", "NODES", "GPUS", "GRANTED", "BURST", "OVERCOMMIT", "TENANTS")
    rows = [header] + [(
        r.name, r.mode, str(len(r.nodes)), str(r.capacity), _number(r.granted), _number(r.burst),
        "-" if r.overcommit is None else f"{r.overcommit:.2f}", ",".join(r.tenants) or "-",
    ) for r in reports]
    problems = [f"{r.name}: {problem}" for r in reports for problem in r.problems]
    return "\n".join([align_columns(rows), *(f"PROBLEM {line}" for line in problems)])


def pool_figures(reports: list[PoolReport]) -> list[PoolFigures]:
    """The reports as the operator's pool metrics publish them."""
    return [PoolFigures(pool=r.name, mode=r.mode, nodes=len(r.nodes), gpus=r.capacity, granted=r.granted,
                        burst=r.burst, overcommit=r.overcommit) for r in reports]


def format_metrics(reports: list[PoolReport]) -> str:
    """Prometheus text exposition of the report: the same pool gauges `gputenant run` serves."""
    return pool_exposition(pool_figures(reports))
