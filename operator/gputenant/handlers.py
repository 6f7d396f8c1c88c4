"""kopf wiring: one idempotent pipeline for create/resume/update, a drift timer, deletion; the
admission guard and the GPU pools loop when ``gputenant run`` asks for them.

Loaded by ``gputenant run``, which calls `prepare` before kopf starts. Everything the handlers
share lives in `Runtime`; the handlers only translate pipeline outcomes into kopf's retry
semantics.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import kopf

from gputenant import GROUP, KIND, PLURAL, VERSION, naming
from gputenant.api import conditions as reasons
from gputenant.attestation.run import Attestor, publish_tenant_conditions
from gputenant.config.models import OperatorConfig
from gputenant.guard.flags import check_webhook_arguments
from gputenant.guard.standalone import GuardProcess
from gputenant.kube import ApiError, KubeClient
from gputenant.kube.lease import LeaseElector, acquire_standing_by
from gputenant.metrics import OperatorMetrics
from gputenant.pools import PoolReport, device_plugin_config_data
from gputenant.pools.apply import apply_pools, collect_pool_reports
from gputenant.pools.report import pool_figures
from gputenant.reconcile import conditions as cond
from gputenant.reconcile.events import API_VERSION, post_event
from gputenant.reconcile.memory import RETRY_ANNOTATION
from gputenant.reconcile.offboard import offboard
from gputenant.reconcile.pipeline import Outcome, Reconciler
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.rechecks import Rechecks
from gputenant.reconcile.steps.argocd import argocd_namespaces
from gputenant.timefmt import rfc3339
from gputenant.usage import (
    PrometheusError,
    UsageQueries,
    publish_usage,
    read_usage,
    tenant_namespaces,
    usage_figures,
)

log = logging.getLogger(__name__)

CONFIG_ENV = "GPUTENANT_CONFIG"
RESYNC_ENV = "GPUTENANT_RESYNC_SECONDS"
DELETION_RETRY_ENV = "GPUTENANT_DELETION_RETRY_SECONDS"
ATTESTATION_IMAGE_ENV = "GPUTENANT_ATTESTATION_IMAGE"
"""The isolation canary's image (docs/attestation.md); unset: no pool is attested."""
ATTESTATION_INTERVAL_ENV = "GPUTENANT_ATTESTATION_INTERVAL_SECONDS"
ATTESTATION_NAMESPACE_ENV = "GPUTENANT_ATTESTATION_NAMESPACE"
ATTESTATION_QUEUE_ENV = "GPUTENANT_ATTESTATION_QUEUE"


def default_reconcile_concurrency() -> int:
    """Reconciles mostly wait on the API and Helm; a few per core keeps every Helm slot busy
    without hundreds of tenants queueing for the client's connections at once."""
    return 8 * (os.cpu_count() or 1)
RESOURCE = (GROUP, VERSION, PLURAL)


@dataclass
class Runtime:
    config: OperatorConfig
    client: KubeClient
    reconciler: Reconciler
    resync_seconds: float
    deletion_retry_seconds: float
    pools_interval_seconds: float = 0.0
    """How often the GPU pools are applied; 0: never (no pools, or turned off)."""
    guard: GuardProcess | None = None
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    pool_reports: list[PoolReport] = field(default_factory=list)
    pools_task: asyncio.Task | None = None
    reconcile_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(default_reconcile_concurrency()))
    """Pipeline runs in flight across all tenants (`gputenant run --reconcile-concurrency`)."""
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    prometheus_url: str | None = None
    """Where the DCGM series are read for allocation against use (`gputenant run --prometheus-url`)."""
    usage_window: str = "1h"
    usage_task: asyncio.Task | None = None
    attestor: Attestor | None = None
    """Runs each pool's isolation canary and keeps the verdicts; None: attestation is off."""
    attestation_task: asyncio.Task | None = None
    guard_started: bool = False
    elector: LeaseElector | None = None
    """Set by `lead`: this replica holds the Lease and renews it while kopf runs."""
    lease_task: asyncio.Task | None = None
    rechecks: Rechecks = field(init=False)
    """Looks again at tenants that wait (their control plane starting), outside kopf's retries."""

    def __post_init__(self) -> None:
        self.rechecks = Rechecks(self.reconcile, lambda name: self.client.get(API_VERSION, KIND, name))

    def lock(self, name: str) -> asyncio.Lock:
        """One pipeline run per tenant at a time (the timer and change handlers may overlap)."""
        return self.locks.setdefault(name, asyncio.Lock())

    def forget(self, name: str, uid: str | None) -> None:
        """Drop what is kept for a tenant that is gone: its lock (unless a handler still holds it)
        and the reconciler's memory of it."""
        lock = self.locks.get(name)
        if lock is not None and not lock.locked():
            del self.locks[name]
        if uid:
            self.reconciler.forget(uid)
        self.rechecks.forget(name)
        self.metrics.forget_tenant(name)

    async def reconcile(self, body: kopf.Body | dict) -> Outcome:
        """One pipeline run for the tenant, once it holds the tenant's lock and a reconcile slot; a
        tenant that waits is looked at again by `rechecks`."""
        name = body["metadata"]["name"]
        async with self.lock(name), self.reconcile_slots:
            outcome = await self.reconciler.reconcile(dict(body))
        self.rechecks.follow(name, outcome.wait_after)
        return outcome


_runtime: Runtime | None = None


def runtime() -> Runtime:
    if _runtime is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return _runtime


def build_runtime(config: OperatorConfig, kubeconfig: str | None, *, helm_concurrency: int | None = None,
                  reconcile_concurrency: int | None = None, metrics: OperatorMetrics | None = None) -> Runtime:
    """The operator's shared parts; a concurrency left None is the default (helm: twice the cores,
    reconciles: eight times the cores); metrics None: a registry nobody serves."""
    from gputenant.helm import ChartRef, VClusterReleases
    from gputenant.reconcile.adapters import HelmReleases, TokenKubeconfigs

    metrics = metrics or OperatorMetrics()
    client = KubeClient.from_kubeconfig(kubeconfig, config.field_manager)
    releases = HelmReleases(VClusterReleases(kubeconfig, max_concurrent=helm_concurrency, metrics=metrics),
                            ChartRef.from_config(config.vcluster))
    issuer = TokenKubeconfigs(config.field_manager)
    return Runtime(
        config=config, client=client, reconciler=Reconciler(client, config, releases, issuer, metrics=metrics),
        metrics=metrics,
        resync_seconds=float(os.environ.get(RESYNC_ENV, "60")),
        deletion_retry_seconds=float(os.environ.get(DELETION_RETRY_ENV, "300")),
        reconcile_slots=asyncio.Semaphore(reconcile_concurrency or default_reconcile_concurrency()))


def prepare(config: OperatorConfig, kubeconfig: str | None, *, pools_interval_seconds: float = 0.0,
            webhook_args: argparse.Namespace | None = None, helm_concurrency: int | None = None,
            reconcile_concurrency: int | None = None, metrics: OperatorMetrics | None = None,
            prometheus_url: str | None = None, usage_window: str = "1h") -> Runtime:
    """Build the runtime and, when the webhook flags ask for it, the admission guard, which the
    startup handler starts in a process of its own (reconciliation must not delay pod admission).
    Raises ValueError for flags or pools that cannot work (the message names the fix)."""
    global _runtime
    device_plugin_config_data(config)  # PoolConfigError now rather than in every pools round
    rt = build_runtime(config, kubeconfig, helm_concurrency=helm_concurrency,
                       reconcile_concurrency=reconcile_concurrency, metrics=metrics)
    rt.pools_interval_seconds = pools_interval_seconds
    rt.prometheus_url, rt.usage_window = prometheus_url, usage_window
    rt.attestor = attestor_from_environment(config)
    if webhook_args is not None and webhook_args.webhook_host:
        check_webhook_arguments(webhook_args)
        rt.guard = GuardProcess(Path(kubeconfig) if kubeconfig else None, config, webhook_args,
                                observe=rt.metrics.observe_guard_decision)
    _runtime = rt
    return rt


def attestor_from_environment(config: OperatorConfig) -> Attestor | None:
    """The isolation canaries, when the configuration has pools and the environment names the image."""
    image = os.environ.get(ATTESTATION_IMAGE_ENV)
    if not image or not config.pools:
        return None
    return Attestor(image=image, namespace=os.environ.get(ATTESTATION_NAMESPACE_ENV, config.operator_namespace),
                    interval=float(os.environ.get(ATTESTATION_INTERVAL_ENV, "3600")),
                    queue=os.environ.get(ATTESTATION_QUEUE_ENV) or None)


def lead(rt: Runtime, kubeconfig: str | None, *, lease: str, identity: str, liveness_url: str | None) -> None:
    """Leader election, before kopf starts: serve the admission guard now (every replica answers
    pod reviews), then block until this replica holds the Lease, so a standby neither watches nor
    reconciles anything. The startup handler keeps renewing it."""
    start_guard(rt)

    async def acquire() -> None:
        async with KubeClient.from_kubeconfig(kubeconfig, rt.config.field_manager) as client:
            await acquire_standing_by(LeaseElector(client, rt.config.operator_namespace, lease, identity), liveness_url)

    asyncio.run(acquire())
    rt.elector = LeaseElector(rt.client, rt.config.operator_namespace, lease, identity)


def start_guard(rt: Runtime) -> None:
    if rt.guard is not None and not rt.guard_started:
        rt.guard.start()
        rt.guard_started = True
        lower_priority(RECONCILE_NICENESS)


def lower_priority(increment: int) -> None:
    """Raise the niceness of every thread of this process by `increment`. Linux keeps a niceness per
    thread (``os.nice`` changes only the caller's, and this runs in a worker thread while kopf's
    event loop runs in another); threads and processes started afterwards inherit it from their
    parent thread, so the helm processes reconciliation starts run at it too."""
    for thread in os.listdir("/proc/self/task"):
        tid = int(thread)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + increment)
        except ProcessLookupError:
            continue  # the thread ended meanwhile


def lost_lease(rt: Runtime) -> None:
    """Another replica may lead from now on: stop at once, as client-go's controllers do (the
    kubelet restarts the pod, which then stands by)."""
    if rt.guard is not None:
        rt.guard.stop(timeout=5)
    os._exit(LOST_LEASE_EXIT_CODE)


LOST_LEASE_EXIT_CODE = 3
RECONCILE_NICENESS = 10
"""Reconciliation (and the helm processes it starts) yields the CPU to the admission guard's
process: a pod review is waited on by a user, a tenant's onboarding is not."""


@kopf.on.login()
def login(**_: object) -> kopf.ConnectionInfo:
    """kopf logs in with the operator's own client identity. Its default login goes through the
    `kubernetes` package, which copies an inline client key into TMPDIR for the life of the process
    (and leaves it there after a SIGKILL); this one keeps the key in memory."""
    return runtime().client.kopf_connection()


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_) -> None:
    """Own finalizer and annotation storage (status is ours alone); serve the guard and keep the
    GPU pools when `prepare` set them up."""
    rt = runtime()
    settings.persistence.finalizer = naming.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key=naming.LAST_HANDLED_ANNOTATION.removeprefix(f"{GROUP}/"))
    settings.posting.level = logging.WARNING
    await asyncio.to_thread(start_guard, rt)
    if rt.elector is not None:
        rt.lease_task = asyncio.create_task(rt.elector.keep(on_lost=lambda: lost_lease(rt)), name="gputenant-lease")
    if rt.pools_interval_seconds > 0:
        rt.pools_task = asyncio.create_task(keep_pools(rt), name="gputenant-pools")
    if rt.prometheus_url:
        rt.usage_task = asyncio.create_task(keep_usage(rt), name="gputenant-usage")
    if rt.attestor is not None:
        rt.attestation_task = asyncio.create_task(keep_attestation(rt, rt.attestor), name="gputenant-attestation")
    log.info("gpu-tenant-operator started (field manager %s, admission guard %s, GPU pools every %s)",
             rt.config.field_manager, "on" if rt.guard else "off",
             f"{rt.pools_interval_seconds:g}s" if rt.pools_interval_seconds > 0 else "never")


@kopf.on.cleanup()
async def cleanup(**_) -> None:
    if _runtime is None:
        return
    await _runtime.rechecks.close()
    if _runtime.guard is not None:
        await asyncio.to_thread(_runtime.guard.stop)
    for task in (_runtime.pools_task, _runtime.usage_task, _runtime.attestation_task, _runtime.lease_task):
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if _runtime.elector is not None:
        await _runtime.elector.release()
    await _runtime.client.close()


@kopf.on.probe(id="tenants")
async def probe(**_) -> int:
    """Liveness: the number of tenants locked for reconciling right now (proves the loop runs)."""
    return sum(lock.locked() for lock in runtime().locks.values())


@kopf.on.probe(id="pools")
async def pools_probe(**_) -> dict:
    """The last GPU pool report, per pool (also on the liveness endpoint)."""
    return {report.name: pool_summary(report) for report in runtime().pool_reports}


def pool_summary(report: PoolReport) -> dict:
    return {"mode": report.mode, "nodes": len(report.nodes), "gpus": report.capacity,
            "granted": report.granted, "burst": report.burst, "overcommit": report.overcommit,
            "tenants": report.tenants, "isolation": report.isolation}


async def keep_pools(rt: Runtime) -> None:
    """Apply the GPU pools now and every `pools_interval_seconds` (writes only what differs), and
    refresh the pool report every resync period, so it follows tenants coming and going. A transient
    API failure is retried at the next tick; any other (the device-plugin namespace missing, RBAC)
    at the next pools interval, as retrying it every tick would only repeat a failing write (one
    per resync period in the benchmark's steady state)."""
    loop = asyncio.get_running_loop()
    next_apply = loop.time()
    while True:
        try:
            if loop.time() >= next_apply:
                await apply_pools_once(rt)
                next_apply = loop.time() + rt.pools_interval_seconds
            await refresh_pool_reports(rt)
        except ApiError as error:
            retry_in = pools_tick(rt) if error.transient else rt.pools_interval_seconds
            next_apply = loop.time() + retry_in
            log.warning("GPU pools not applied: %s; retrying in %gs", error, retry_in)
        await asyncio.sleep(pools_tick(rt))


def pools_tick(rt: Runtime) -> float:
    return min(rt.pools_interval_seconds, rt.resync_seconds)


async def apply_pools_once(rt: Runtime) -> None:
    result = await apply_pools(rt.client, rt.config)
    for written in result.written:
        log.info("GPU pools: applied %s", written)
    for problem in result.plan.problems:
        log.warning("GPU pools: %s", problem)
    for blocked in result.blocked:
        log.warning("GPU pools: held back: %s", blocked.message)


async def refresh_pool_reports(rt: Runtime) -> None:
    """The report served by the `pools` probe and the pool metrics; logged when it changes."""
    reports = await collect_pool_reports(rt.client, rt.config)
    if rt.attestor is not None:
        for report in reports:
            report.isolation = rt.attestor.summary(report.name)
    rt.metrics.publish_pools(pool_figures(reports))
    if reports != rt.pool_reports:
        log.info("GPU pools: %s", "; ".join(f"{r.name}: {pool_summary(r)}" for r in reports))
    rt.pool_reports = reports


async def keep_attestation(rt: Runtime, attestor: Attestor) -> None:
    """Attest the pools that are due (one canary at a time), then bring every placed tenant's
    IsolationVerified in line with its pool's verdict; every resync period. A failed API call is a
    warning and waits for the next tick."""
    while True:
        try:
            await attestor.round(rt.client, rt.config)
            await publish_tenant_conditions(rt.client, attestor, rt.lock)
        except ApiError as error:
            log.warning("isolation attestation: %s; retrying in %gs", error, rt.resync_seconds)
        await asyncio.sleep(rt.resync_seconds)


async def keep_usage(rt: Runtime) -> None:
    """Allocation against use per tenant, read from Prometheus every resync period into the metrics
    and each tenant's status.usage (with the idle-sleep policy). A failed read is a warning; the last
    figures stay until the next one succeeds."""
    queries = UsageQueries.over(rt.usage_window, f"{rt.config.namespace_prefix}.+")
    while True:
        try:
            tenants = await rt.client.list(API_VERSION, KIND)
            usage = await asyncio.to_thread(read_usage, rt.prometheus_url or "", tenant_namespaces(tenants, rt.config),
                                            queries)
            rt.metrics.publish_usage(usage_figures(usage))
            await publish_usage(rt.client, tenants, usage, rt.usage_window, datetime.now(UTC))
        except (ApiError, PrometheusError) as error:
            log.warning("GPU usage not read: %s; retrying in %gs", error, rt.resync_seconds)
        await asyncio.sleep(rt.resync_seconds)


async def _reconcile(body: kopf.Body) -> None:
    outcome = await runtime().reconcile(body)
    if outcome.retry_after is not None:
        raise kopf.TemporaryError("not ready yet; see status.conditions", delay=outcome.retry_after)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", naming.ROTATE_ANNOTATION))
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", RETRY_ANNOTATION))
async def reconcile(body: kopf.Body, **_) -> None:
    await _reconcile(body)


@kopf.timer(*RESOURCE, interval=float(os.environ.get(RESYNC_ENV, "60")), idle=5)
async def resync(body: kopf.Body, **_) -> None:
    """Drift check and kubeconfig rotation: the same pipeline; writes only what drifted."""
    await runtime().reconcile(body)


@kopf.on.delete(*RESOURCE)
async def delete(body: kopf.Body, **_) -> None:
    rt = runtime()
    tenant = body["metadata"]["name"]
    spec = body.get("spec") or {}
    if spec.get("preventDeletion"):
        await _report_prevented(rt, body)
        raise kopf.TemporaryError(
            "spec.preventDeletion is true; set it to false to let the deletion proceed",
            delay=rt.deletion_retry_seconds)
    try:
        async with rt.lock(tenant):
            await offboard(rt.client, rt.reconciler.releases, rt.config, tenant,
                           retain=spec.get("deletionPolicy") == "Retain", argocd_namespaces=argocd_namespaces(dict(body)),
                           uid=body["metadata"].get("uid"))
    except StepError as error:
        raise kopf.TemporaryError(f"{error.reason}: {error.message}", delay=10) from None
    except ApiError as error:
        raise kopf.TemporaryError(str(error), delay=10) from None
    rt.forget(tenant, body["metadata"].get("uid"))


async def _report_prevented(rt: Runtime, body: kopf.Body) -> None:
    """DeletionPrevented=True in status and one Event, once; a failed write is retried with the
    deletion (the caller raises TemporaryError either way)."""
    status = dict(body.get("status") or {})
    now = datetime.now(UTC)
    conditions = cond.set_condition(
        list(status.get("conditions") or []), reasons.DELETION_PREVENTED, "True", reasons.PREVENT_DELETION_SET,
        "deletion is blocked while spec.preventDeletion is true", body["metadata"].get("generation"), rfc3339(now))
    if conditions == list(status.get("conditions") or []):
        return
    try:
        await rt.client.patch_status(API_VERSION, KIND, body["metadata"]["name"],
                                     {"conditions": cond.ordered(conditions)})
    except ApiError as error:
        log.warning("tenant %s: could not report DeletionPrevented: %s", body["metadata"]["name"], error)
        return
    await post_event(rt.client, dict(body), "Warning", reasons.DELETION_PREVENTED,
                     "deletion blocked by spec.preventDeletion; set it to false to proceed", now)
