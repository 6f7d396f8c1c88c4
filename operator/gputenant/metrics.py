"""The operator's Prometheus metrics: what a platform team graphs and alerts on (docs/metrics.md).

Registration only, no IO: `OperatorMetrics` registers every family on the registry it is given,
and the parts of the operator that observe something (the pipeline, the Helm boundary, the pools
loop, the admission guard) call its methods. `gputenant run --metrics-address` serves the
registry. Labels stay bounded: steps, reasons, rules, pools and tenant names, never pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PHASES = ("Ready", "NotReady", "Unknown")
"""A tenant's phase is its Ready condition: True, False, or Unknown (not decided yet)."""
PREPARE_STEP = "prepare"
"""Validation, the policy decision and rendering, before the step table runs."""
HELM_SKIP = "skip"
"""A pass that did not run Helm because the recorded values hash still matched."""
SUCCESS = "success"

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
HELM_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
GUARD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""The API server waits 10 s at most for the guard; answers normally take milliseconds."""


def step_label(condition_type: str) -> str:
    """The `step` label of a pipeline step, from the condition it owns: VClusterReady -> vcluster."""
    return condition_type.removesuffix("Ready").lower()


@dataclass(frozen=True, slots=True)
class TenantFigures:
    """What the metrics keep of one tenant after its latest pass."""

    phase: str
    reason: str
    kubeconfig_expiry: datetime | None = None
    """The earliest expiry of its issued kubeconfigs (status.kubeconfigs[].expiresAt)."""


@dataclass(frozen=True)
class PoolFigures:
    """One GPU pool's capacity and what tenants hold in it (from gputenant.pools' report)."""

    pool: str
    mode: str
    nodes: int
    gpus: int
    granted: float
    burst: float
    overcommit: float | None
    """Guaranteed GPUs per GPU; None for a pool without GPUs."""


class PoolCollector(Collector):
    """The GPU pool gauges from the last published report, replaced wholesale on each publish so a
    pool that left the configuration leaves the metrics too."""

    def __init__(self, pools: Iterable[PoolFigures] = ()):
        self.pools = tuple(pools)

    def collect(self) -> Iterator[Metric]:
        series: tuple[tuple[str, str, Callable[[PoolFigures], float | None]], ...] = (
            ("gputenant_pool_nodes", "Nodes selected by the pool.", lambda p: p.nodes),
            ("gputenant_pool_gpus", "GPUs the pool can promise (configured count, else its nodes' GPUs).", lambda p: p.gpus),
            ("gputenant_pool_granted_gpus", "GPUs guaranteed to tenants (sum of spec.gpu.quota).", lambda p: p.granted),
            ("gputenant_pool_burst_gpus", "GPU limits of the pool's tenants (sum of spec.gpu.limit).", lambda p: p.burst),
            ("gputenant_pool_overcommit_ratio", "Guaranteed GPUs per GPU; above 1 the pool cannot keep every "
             "guarantee.", lambda p: p.overcommit),
        )
        for name, documentation, value in series:
            family = GaugeMetricFamily(name, documentation, labels=["pool", "mode"])
            for pool in self.pools:
                number = value(pool)
                if number is not None:
                    family.add_metric([pool.pool, pool.mode], float(number))
            yield family


@dataclass(frozen=True)
class UsageFigures:
    """One tenant's GPUs held against used over the usage window (from gputenant.usage)."""

    tenant: str
    gpus: int
    held_gpu_hours: float
    used_gpu_hours: float
    idle_gpus: int
    busy_not_working_gpus: int


class UsageCollector(Collector):
    """Allocation against use per tenant, from the last usage read, replaced wholesale."""

    def __init__(self) -> None:
        self.tenants: tuple[UsageFigures, ...] = ()
        self.shares: tuple[tuple[str, str, float], ...] = ()
        """(tenant, pool, GPUs held by share) from the tenants' running pods."""
        self.prices: tuple[tuple[str, str, float], ...] = ()
        """(pool, currency, price per GPU-hour) from the configuration's accounting."""

    def collect(self) -> Iterator[Metric]:
        series: tuple[tuple[str, str, Callable[[UsageFigures], float]], ...] = (
            ("gputenant_tenant_gpus", "GPUs the tenant's pods held in the usage window (DCGM series).",
             lambda u: u.gpus),
            ("gputenant_tenant_held_gpu_hours", "GPU-hours the tenant's pods held in the usage window.",
             lambda u: u.held_gpu_hours),
            ("gputenant_tenant_used_gpu_hours", "GPU-hours of SM activity (DCGM_FI_PROF_SM_ACTIVE) in the usage window.",
             lambda u: u.used_gpu_hours),
            ("gputenant_tenant_idle_gpus", "GPUs the tenant holds whose SMs stayed idle over the usage window.",
             lambda u: u.idle_gpus),
            ("gputenant_tenant_busy_not_working_gpus", "GPUs reading busy by GPU_UTIL while their SMs are mostly "
             "idle (SM_ACTIVE low).", lambda u: u.busy_not_working_gpus),
        )
        for name, documentation, value in series:
            family = GaugeMetricFamily(name, documentation, labels=["tenant"])
            for figures in self.tenants:
                family.add_metric([figures.tenant], float(value(figures)))
            yield family
        shares = GaugeMetricFamily("gputenant_tenant_gpu_shares", "Physical GPUs the tenant's running pods hold now, "
                                   "by share (a KAI fraction its fraction, a time-slice replica 1/replicas, a MIG "
                                   "instance its share of the GPU, a whole GPU 1); integrated over time: GPU-hours.",
                                   labels=["tenant", "pool"])
        for tenant, pool, held in self.shares:
            shares.add_metric([tenant, pool], held)
        yield shares
        prices = GaugeMetricFamily("gputenant_pool_price_per_gpu_hour", "Price of one whole GPU for one hour on the "
                                   "pool (accounting.pricePerGpuHour), for cost queries.", labels=["pool", "currency"])
        for pool, currency, price in self.prices:
            prices.add_metric([pool, currency], price)
        yield prices


@dataclass(frozen=True)
class UnheldMemoryFigures:
    """GPU memory held by no one on one GPU or MIG instance (from gputenant.usage.sentinel)."""

    node: str
    gpu: str
    instance: str
    """The MIG GPU instance id; "" for a whole GPU."""
    mib: float


class HealthCollector(Collector):
    """What the alerts on the platform's own health read: the admission guard's process, each
    pool's isolation verdict and GPU memory held by no one; the last two replaced wholesale."""

    def __init__(self) -> None:
        self.guard_alive: Callable[[], bool] | None = None
        self.isolation: tuple[tuple[str, str, str], ...] = ()
        """(pool, IsolationVerified status, reason) per attested pool."""
        self.unheld: tuple[UnheldMemoryFigures, ...] = ()

    def collect(self) -> Iterator[Metric]:
        guard = GaugeMetricFamily("gputenant_guard_up", "1 while the admission guard's process runs, else 0; absent "
                                  "when the operator serves no guard.")
        if self.guard_alive is not None:
            guard.add_metric([], 1.0 if self.guard_alive() else 0.0)
        yield guard
        isolation = GaugeMetricFamily("gputenant_pool_isolation_verified", "1 while the pool's isolation canary "
                                      "measured what its tier promises, else 0 (reason: the IsolationVerified reason).",
                                      labels=["pool", "reason"])
        for pool, status, reason in self.isolation:
            isolation.add_metric([pool, reason], 1.0 if status == "True" else 0.0)
        yield isolation
        unheld = GaugeMetricFamily("gputenant_gpu_memory_held_by_no_one_mib", "GPU memory (MiB) used on a GPU or MIG "
                                   "instance that no live pod holds, for longer than the sentinel's grace period.",
                                   labels=["node", "gpu", "mig_instance"])
        for figures in self.unheld:
            unheld.add_metric([figures.node, figures.gpu, figures.instance], figures.mib)
        yield unheld


class TenantCollector(Collector):
    """Tenants by phase and reason, each tenant's readiness and its kubeconfigs' time left, read
    from the figures the pipeline last recorded (expiry is computed at scrape time)."""

    def __init__(self, clock: Callable[[], datetime]):
        self.clock = clock
        self.tenants: dict[str, TenantFigures] = {}

    def collect(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        for figures in self.tenants.values():
            counts[(figures.phase, figures.reason)] = counts.get((figures.phase, figures.reason), 0) + 1
        by_reason = GaugeMetricFamily("gputenant_tenants", "Tenants by phase (their Ready condition) and its reason.",
                                      labels=["phase", "reason"])
        for (phase, reason), count in sorted(counts.items()):
            by_reason.add_metric([phase, reason], count)
        yield by_reason
        tenant_ready = GaugeMetricFamily("gputenant_tenant_ready", "1 while the tenant is Ready, else 0; `reason` "
                                         "is its Ready reason (Asleep: it sleeps on purpose).",
                                         labels=["tenant", "reason"])
        expires_in = GaugeMetricFamily("gputenant_kubeconfig_expires_in_seconds",
                                       "Seconds until the tenant's earliest kubeconfig token expires (negative: "
                                       "expired); the operator rotates them at 80% of their lifetime.",
                                       labels=["tenant"])
        now = self.clock()
        for name, figures in sorted(self.tenants.items()):
            tenant_ready.add_metric([name, figures.reason], 1.0 if figures.phase == "Ready" else 0.0)
            if figures.kubeconfig_expiry is not None:
                expires_in.add_metric([name], (figures.kubeconfig_expiry - now).total_seconds())
        yield tenant_ready
        yield expires_in


class OperatorMetrics:
    """Every metric family of `gputenant run`, on `registry` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.step_seconds = Histogram(
            "gputenant_reconcile_step_duration_seconds", "Time one pipeline step took, per step (prepare: validate, "
            "decide, render).", ["step"], buckets=STEP_BUCKETS, registry=self.registry)
        self.reconcile_seconds = Histogram(
            "gputenant_reconcile_duration_seconds", "Time one reconcile pass took, by its result (ready, not_ready, "
            "retrying, failed).", ["result"], buckets=STEP_BUCKETS, registry=self.registry)
        self.reconcile_errors = Counter(
            "gputenant_reconcile_errors", "Steps that ended in an error, by step and condition reason.",
            ["step", "reason"], registry=self.registry)
        self.drift_events = Counter(
            "gputenant_drift_events", "Changes of objects the operator owns made by another hand (the owned-kind "
            "watches), each of which queued its tenant's pass, by kind.", ["kind"], registry=self.registry)
        self.helm_operations = Counter(
            "gputenant_helm_operations", "Helm operations on tenants' vCluster releases by operation (install, "
            "upgrade, unchanged, uninstall, skip) and outcome (success or the failure's reason).",
            ["operation", "outcome"], registry=self.registry)
        self.helm_seconds = Histogram(
            "gputenant_helm_operation_duration_seconds", "Time Helm operations took (one attempt each; skips "
            "are not timed).", ["operation"], buckets=HELM_BUCKETS, registry=self.registry)
        self.guard_seconds = Histogram(
            "gputenant_guard_decision_duration_seconds", "Admission guard decisions by the rule that decided (the "
            "first refusing rule, or none) and outcome, with their latency.", ["rule", "outcome"],
            buckets=GUARD_BUCKETS, registry=self.registry)
        self.tenants = TenantCollector(clock)
        self.pools = PoolCollector()
        self.usage = UsageCollector()
        self.health = HealthCollector()
        self.registry.register(self.tenants)
        self.registry.register(self.health)
        self.registry.register(self.pools)
        self.registry.register(self.usage)

    @contextmanager
    def timing_step(self, step: str) -> Iterator[None]:
        """Observe how long the block took under `step`, whether it returned or raised."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.step_seconds.labels(step).observe(time.perf_counter() - started)

    def step_failed(self, step: str, reason: str) -> None:
        self.reconcile_errors.labels(step, reason).inc()

    def drift_seen(self, kind: str) -> None:
        self.drift_events.labels(kind).inc()

    def pass_finished(self, tenant: str, result: str, seconds: float, figures: TenantFigures) -> None:
        self.reconcile_seconds.labels(result).observe(seconds)
        self.tenants.tenants[tenant] = figures

    def forget_tenant(self, tenant: str) -> None:
        """A deleted tenant leaves the tenant series."""
        self.tenants.tenants.pop(tenant, None)

    def helm_operation(self, operation: str, outcome: str, seconds: float | None = None) -> None:
        self.helm_operations.labels(operation, outcome).inc()
        if seconds is not None:
            self.helm_seconds.labels(operation).observe(seconds)

    def observe_guard_decision(self, rule_id: str, outcome: str, seconds: float) -> None:
        """One admission review: `rule_id` the first rule that refused (or "none"), `outcome`
        allowed or refused."""
        self.guard_seconds.labels(rule_id, outcome).observe(seconds)

    def publish_pools(self, pools: Iterable[PoolFigures]) -> None:
        self.pools.pools = tuple(pools)

    def publish_usage(self, tenants: Iterable[UsageFigures]) -> None:
        self.usage.tenants = tuple(tenants)

    def publish_shares(self, shares: Iterable[tuple[str, str, float]]) -> None:
        """(tenant, pool, GPUs held by share) of every placed tenant."""
        self.usage.shares = tuple(shares)

    def publish_prices(self, currency: str, prices: dict[str, float]) -> None:
        self.usage.prices = tuple((pool, currency, price) for pool, price in sorted(prices.items()))

    def watch_guard(self, alive: Callable[[], bool]) -> None:
        """`gputenant_guard_up` asks `alive` at each scrape."""
        self.health.guard_alive = alive

    def publish_isolation(self, verdicts: Iterable[tuple[str, str, str]]) -> None:
        """(pool, IsolationVerified status, reason) of every attested pool."""
        self.health.isolation = tuple(verdicts)

    def publish_unheld_memory(self, figures: Iterable[UnheldMemoryFigures]) -> None:
        self.health.unheld = tuple(figures)


def pool_exposition(pools: Iterable[PoolFigures]) -> str:
    """The pool gauges alone in Prometheus' text format (`gputenant pools --metrics`)."""
    registry = CollectorRegistry()
    registry.register(PoolCollector(pools))
    return generate_latest(registry).decode()
