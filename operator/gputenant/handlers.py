"""kopf wiring: one idempotent pipeline for create/resume/update, a drift timer, deletion; the
admission guard and the GPU pools loop when ``gputenant run`` asks for them.

Loaded by ``gputenant run``, which calls `prepare` before kopf starts. Everything the handlers
share lives in `gputenant.runtime.Runtime`; the handlers only translate pipeline outcomes into
kopf's retry semantics.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf

from gputenant import GROUP, KIND, PLURAL, VERSION, naming
from gputenant.api import conditions as reasons
from gputenant.api.status import DELETION
from gputenant.attestation.run import Attestor
from gputenant.config.models import OperatorConfig
from gputenant.config.settings import OperatorSettings
from gputenant.guard import gang_groups
from gputenant.guard.flags import check_webhook_arguments
from gputenant.guard.standalone import GuardProcess
from gputenant.kube import ApiError, KubeClient
from gputenant.kube.lease import LeaseElector, acquire_standing_by
from gputenant.loops.attestation import keep_attestation
from gputenant.loops.pools import PoolsLoop, pool_summary
from gputenant.loops.usage import keep_usage
from gputenant.metrics import OperatorMetrics
from gputenant.pools import device_plugin_config_data
from gputenant.reconcile import conditions as cond
from gputenant.reconcile.events import API_VERSION, post_event
from gputenant.reconcile.memory import RETRY_ANNOTATION
from gputenant.reconcile.offboard import offboard
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.steps.argocd import argocd_namespaces
from gputenant.runtime import Runtime, build_runtime
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)

RESOURCE = (GROUP, VERSION, PLURAL)
_runtime: Runtime | None = None


def runtime() -> Runtime:
    if _runtime is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return _runtime


def runtime_for(handler_kwargs: Mapping[str, Any]) -> Runtime:
    """The runtime of a handler that may start a pass: the indexes kopf passed it are handed over
    first, so the pass reads them (`reconcile.cache.WatchCache`)."""
    rt = runtime()
    rt.reconciler.services.cache.hand_over(handler_kwargs)
    return rt


def prepare(config: OperatorConfig, kubeconfig: str | None, settings: OperatorSettings, *,
            pools_interval_seconds: float = 0.0, webhook_args: argparse.Namespace | None = None,
            metrics: OperatorMetrics | None = None, usage_window: str = "1h") -> Runtime:
    """Build the runtime and, when the webhook flags ask for it, the admission guard, which the
    startup handler starts in a process of its own (reconciliation must not delay pod admission).
    Raises ValueError for flags or pools that cannot work (the message names the fix)."""
    global _runtime
    device_plugin_config_data(config)  # PoolConfigError now rather than in every pools round
    rt = build_runtime(config, kubeconfig, settings, metrics=metrics)
    rt.pools_interval_seconds = pools_interval_seconds
    rt.prometheus_url, rt.usage_window = settings.prometheus_url, usage_window
    rt.attestor = attestor_from_settings(config, settings)
    if webhook_args is not None and webhook_args.webhook_host:
        check_webhook_arguments(webhook_args)
        rt.guard = GuardProcess(Path(kubeconfig) if kubeconfig else None, config, webhook_args,
                                observe=rt.metrics.observe_guard_decision)
    _runtime = rt
    return rt


def attestor_from_settings(config: OperatorConfig, settings: OperatorSettings) -> Attestor | None:
    """The isolation canaries, when the configuration has pools and the settings name the image."""
    if not settings.attestation_image or not config.pools:
        return None
    return Attestor(image=settings.attestation_image,
                    namespace=settings.attestation_namespace or config.operator_namespace,
                    interval=settings.attestation_interval_seconds, queue=settings.attestation_queue)


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
        rt.metrics.watch_guard(lambda: rt.guard is not None and rt.guard.alive)
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
    """Own finalizer (status is ours alone), kopf's diff base and progress in this process
    (`gputenant.kopf_state`); serve the guard and keep the GPU pools when `prepare` set them up."""
    rt = runtime()
    settings.persistence.finalizer = naming.FINALIZER
    settings.persistence.progress_storage = rt.progress
    settings.persistence.diffbase_storage = rt.diffbase
    settings.posting.level = logging.WARNING
    await asyncio.to_thread(start_guard, rt)
    start_loops(rt)
    log.info("gpu-tenant-operator started (field manager %s, admission guard %s, GPU pools every %s)",
             rt.config.field_manager, "on" if rt.guard else "off",
             f"{rt.pools_interval_seconds:g}s" if rt.pools_interval_seconds > 0 else "never")


@kopf.on.cleanup()
async def cleanup(**_) -> None:
    if _runtime is None:
        return
    await _runtime.stop_passes()
    if _runtime.guard is not None:
        await asyncio.to_thread(_runtime.guard.stop)
    await _runtime.loops.stop()
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
    pools = runtime().pools
    return {report.name: pool_summary(report) for report in (pools.reports if pools else [])}


def _unheld_to_pools(rt: Runtime):
    """Where the usage loop hands the GPU-memory sentinel's findings: the pool report's loop."""
    def hand_over(unheld) -> None:
        if rt.pools is not None:
            rt.pools.unheld_memory = unheld
    return hand_over


def start_loops(rt: Runtime) -> None:
    """The background loops `prepare` asked for, under the runtime's supervisor (a loop that
    fails unexpectedly starts again a resync period later)."""
    elector, period = rt.elector, rt.resync_seconds
    if elector is not None:
        rt.loops.start("lease", lambda: elector.keep(on_lost=lambda: lost_lease(rt)), period)
    if rt.pools_interval_seconds > 0:
        pools = rt.pools = PoolsLoop(rt.client, rt.config, rt.metrics, rt.pools_interval_seconds, period, rt.attestor)
        rt.loops.start("pools", pools.run, period)
    if rt.prometheus_url:
        url = rt.prometheus_url
        rt.loops.start("usage", lambda: keep_usage(rt.client, rt.config, rt.metrics, url, rt.usage_window, period,
                                                   on_unheld=_unheld_to_pools(rt)), period)
    if rt.attestor is not None:
        attestor = rt.attestor
        rt.loops.start("attestation", lambda: keep_attestation(rt.client, rt.config, attestor, period),
                       period)


async def _reconcile(body: kopf.Body, handler_kwargs: dict) -> None:
    outcome = await runtime_for(handler_kwargs).reconcile(body)
    if outcome.retry_after is not None:
        raise kopf.TemporaryError("not ready yet; see status.conditions", delay=outcome.retry_after)


gang_groups.register(kopf.get_default_registry(), lambda: runtime().client)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", naming.ROTATE_ANNOTATION))
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", naming.REVOKE_ANNOTATION))
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", RETRY_ANNOTATION))
async def reconcile(body: kopf.Body, **kwargs) -> None:
    await _reconcile(body, kwargs)


@kopf.timer(*RESOURCE, interval=OperatorSettings().resync_seconds, initial_delay=OperatorSettings().resync_seconds,
            idle=5)
async def resync(body: kopf.Body, **kwargs) -> None:
    """Drift check and kubeconfig rotation: the same pipeline; writes only what drifted. First a
    period after the tenant is seen: the create or resume handler has just run the whole pipeline,
    so a first run at once would list and check everything again while the tenant onboards."""
    await runtime_for(kwargs).drift_check(body)


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
    before = cond.parse((body.get("status") or {}).get("conditions") or [])
    now = datetime.now(UTC)
    conditions = cond.owned(cond.set_condition(
        before, reasons.DELETION_PREVENTED, "True", reasons.PREVENT_DELETION_SET,
        "deletion is blocked while spec.preventDeletion is true", body["metadata"].get("generation"), rfc3339(now)),
        DELETION)
    if conditions == cond.owned(before, DELETION):
        return
    try:
        await rt.client.apply_status(API_VERSION, KIND, body["metadata"]["name"],
                                     {"conditions": cond.as_status(conditions)}, DELETION)
    except ApiError as error:
        log.warning("tenant %s: could not report DeletionPrevented: %s", body["metadata"]["name"], error)
        return
    await post_event(rt.client, dict(body), "Warning", reasons.DELETION_PREVENTED,
                     "deletion blocked by spec.preventDeletion; set it to false to proceed", now)
