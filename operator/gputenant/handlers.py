"""kopf wiring of one cell: one idempotent pipeline for create/resume/update (its resync is the work
queue's timed requeue, `Cell.run_pass`), deletion, the indexes and the control-plane watch; the admission guard and the GPU pools loop when
``gputenant run`` asks for them.

``gputenant run`` builds the cell (`prepare`) and registers it into a kopf registry of its own
(`register`) before kopf starts; a second cell in the same process gets a second registry. The
handlers are closures over their cell, log in with its client, and only translate pipeline
outcomes into kopf's retry semantics.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

import kopf

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.attestation.run import Attestor
from gputenant.cell import Cell, build_cell
from gputenant.config.fleet import FleetRole
from gputenant.config.models import OperatorConfig
from gputenant.config.settings import OperatorSettings
from gputenant.fleet.hub import Hub, StillOnMember, fleet_summary
from gputenant.fleet.reporter import keep_reporting
from gputenant.guard import gang_groups
from gputenant.guard.flags import check_webhook_arguments
from gputenant.guard.standalone import GuardProcess
from gputenant.kube import ApiError, KubeClient
from gputenant.kube.lease import LeaseElector, acquire_standing_by
from gputenant.loops.attestation import keep_attestation
from gputenant.loops.memory import keep_memory_released
from gputenant.loops.pools import PoolsLoop, pool_summary
from gputenant.loops.usage import keep_usage
from gputenant.metrics import OperatorMetrics
from gputenant.owned_watch import start_owned_watches
from gputenant.pools import device_plugin_config_data
from gputenant.reconcile.deletion import DeletionHeld
from gputenant.reconcile.memory import RETRY_ANNOTATION
from gputenant.reconcile.ports import StepError
from gputenant.work_queue import Urgency

log = logging.getLogger(__name__)

RESOURCE = (GROUP, VERSION, PLURAL)


def prepare(config: OperatorConfig, kubeconfig: str | None, settings: OperatorSettings, *,
            pools_interval_seconds: float = 0.0, webhook_args: argparse.Namespace | None = None,
            metrics: OperatorMetrics | None = None, usage_window: str = "1h") -> Cell:
    """Build the cell and, when the webhook flags ask for it, the admission guard, which the
    startup handler starts in a process of its own (reconciliation must not delay pod admission).
    Raises ValueError for flags or pools that cannot work (the message names the fix)."""
    device_plugin_config_data(config)  # PoolConfigError now rather than in every pools round
    rt = build_cell(config, kubeconfig, settings, metrics=metrics)
    rt.pools_interval_seconds = pools_interval_seconds
    rt.prometheus_url, rt.usage_window = settings.prometheus_url, usage_window
    rt.attestor = attestor_from_settings(config, settings)
    if config.fleet.role is FleetRole.HUB:
        rt.hub = Hub(rt.client, config)
    if webhook_args is not None and webhook_args.webhook_host:
        check_webhook_arguments(webhook_args)
        rt.guard = GuardProcess(Path(rt.kubeconfig) if rt.kubeconfig else None, config, webhook_args,
                                observe=rt.metrics.observe_guard_decision)
    return rt


def attestor_from_settings(config: OperatorConfig, settings: OperatorSettings) -> Attestor | None:
    """The isolation canaries, when the configuration has pools and the settings name the image."""
    if not settings.attestation_image or not config.pools:
        return None
    return Attestor(image=settings.attestation_image,
                    namespace=settings.attestation_namespace or config.operator_namespace,
                    interval=settings.attestation_interval_seconds, queue=settings.attestation_queue)


def lead(rt: Cell, *, lease: str, identity: str, liveness_url: str | None) -> None:
    """Leader election, before kopf starts: serve the admission guard now (every replica answers
    pod reviews), then block until this replica holds the Lease, so a standby neither watches nor
    reconciles anything. The startup handler keeps renewing it."""
    start_guard(rt)

    async def acquire() -> None:
        async with KubeClient.from_kubeconfig(rt.kubeconfig, rt.config.field_manager) as client:
            await acquire_standing_by(LeaseElector(client, rt.config.operator_namespace, lease, identity), liveness_url)

    asyncio.run(acquire())
    rt.elector = LeaseElector(rt.client, rt.config.operator_namespace, lease, identity)


def start_guard(rt: Cell) -> None:
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


def lost_lease(rt: Cell) -> None:
    """Another replica may lead from now on: stop at once, as client-go's controllers do (the
    kubelet restarts the pod, which then stands by)."""
    if rt.guard is not None:
        rt.guard.stop(timeout=5)
    os._exit(LOST_LEASE_EXIT_CODE)


LOST_LEASE_EXIT_CODE = 3
RECONCILE_NICENESS = 10
"""Reconciliation (and the helm processes it starts) yields the CPU to the admission guard's
process: a pod review is waited on by a user, a tenant's onboarding is not."""


def register(registry: kopf.OperatorRegistry, rt: Cell) -> None:
    """Every handler of the cell `rt` into `registry`: login with the cell's client, start-up and
    clean-up, the probes, the pipeline's handlers, deletion, the indexes, the
    control-plane watch, the watches of what a tenant's view shows and the gang PodGroups."""
    from gputenant import control_plane_watch, indexes, view_watch

    _register_lifecycle(registry, rt)
    if rt.hub is not None:
        _register_hub_handlers(registry, rt.hub, rt.deletion_retry_seconds)
        return
    _register_tenant_handlers(registry, rt)
    indexes.register(registry, rt)
    control_plane_watch.register(registry, rt)
    view_watch.register(registry, rt)
    gang_groups.register(registry, lambda: rt.client)


def _register_lifecycle(registry: kopf.OperatorRegistry, rt: Cell) -> None:
    @kopf.on.login(id="login", registry=registry)
    def login(**_: object) -> kopf.ConnectionInfo:
        """kopf logs in with the cell's own client identity. Its default login goes through the
        `kubernetes` package, which reads $KUBECONFIG and copies an inline client key into TMPDIR
        for the life of the process (and leaves it there after a SIGKILL); this one keeps the key
        in memory."""
        return rt.client.kopf_connection()

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_) -> None:
        """Own finalizer (status is ours alone), kopf's diff base and progress in this process
        (`gputenant.kopf_state`); serve the guard and keep the GPU pools when `prepare` set them up."""
        settings.persistence.finalizer = naming.FINALIZER
        settings.persistence.progress_storage = rt.progress
        settings.persistence.diffbase_storage = rt.diffbase
        settings.posting.level = logging.WARNING
        await asyncio.to_thread(start_guard, rt)
        rt.queue.start()
        start_loops(rt)
        log.info("gpu-tenant-operator started (field manager %s, admission guard %s, GPU pools every %s)",
                 rt.config.field_manager, "on" if rt.guard else "off",
                 f"{rt.pools_interval_seconds:g}s" if rt.pools_interval_seconds > 0 else "never")

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(**_) -> None:
        await rt.stop_passes()
        if rt.guard is not None:
            await asyncio.to_thread(rt.guard.stop)
        await rt.loops.stop()
        if rt.hub is not None:
            await rt.hub.close()
        if rt.elector is not None:
            await rt.elector.release()
        await rt.client.close()

    @kopf.on.probe(id="tenants", registry=registry)
    async def probe(**_) -> int:
        """Liveness: the number of tenant passes in flight right now."""
        return rt.queue.in_flight

    @kopf.on.probe(id="fleet", registry=registry)
    async def fleet_probe(**_) -> dict:
        """A hub's members as its last round read them, and where each tenant is placed."""
        return fleet_summary(rt.hub.last) if rt.hub is not None else {}

    @kopf.on.probe(id="pools", registry=registry)
    async def pools_probe(**_) -> dict:
        """The last GPU pool report, per pool (also on the liveness endpoint)."""
        return {report.name: pool_summary(report) for report in (rt.pools.reports if rt.pools else [])}


def _register_tenant_handlers(registry: kopf.OperatorRegistry, rt: Cell) -> None:
    @kopf.on.resume(*RESOURCE, id="reconcile", registry=registry)
    @kopf.on.create(*RESOURCE, id="reconcile", registry=registry)
    @kopf.on.update(*RESOURCE, id="reconcile", field="spec", registry=registry)
    @kopf.on.field(*RESOURCE, id="reconcile", field=("metadata", "annotations", naming.ROTATE_ANNOTATION), registry=registry)
    @kopf.on.field(*RESOURCE, id="reconcile", field=("metadata", "annotations", naming.REVOKE_ANNOTATION), registry=registry)
    @kopf.on.field(*RESOURCE, id="reconcile", field=("metadata", "annotations", RETRY_ANNOTATION), registry=registry)
    async def reconcile(body: kopf.Body, **kwargs) -> None:
        """A new tenant, a spec change, an annotation or a restart: its pass is queued."""
        rt.with_indexes(kwargs).enqueue(body["metadata"]["name"], Urgency.CHANGE)

    @kopf.on.delete(*RESOURCE, id="delete", registry=registry)
    async def delete(body: kopf.Body, **_) -> None:
        """The cell's deletion path (`Cell.offboard`), its waits turned into kopf's retries."""
        try:
            await rt.offboard(dict(body))
        except DeletionHeld as held:
            raise kopf.TemporaryError(str(held), delay=rt.deletion_retry_seconds) from None
        except StepError as error:
            raise kopf.TemporaryError(f"{error.reason}: {error.message}", delay=10) from None
        except ApiError as error:
            raise kopf.TemporaryError(str(error), delay=10) from None


def _register_hub_handlers(registry: kopf.OperatorRegistry, hub: Hub, retry_seconds: float) -> None:
    """A fleet's hub: a tenant created, changed or resumed wakes the hub's round (`fleet.hub`); its
    deletion is carried to its member (`Hub.offboard`)."""
    @kopf.on.resume(*RESOURCE, id="place", registry=registry)
    @kopf.on.create(*RESOURCE, id="place", registry=registry)
    @kopf.on.update(*RESOURCE, id="place", field="spec", registry=registry)
    async def place(**_) -> None:
        hub.wake.set()

    @kopf.on.delete(*RESOURCE, id="delete", registry=registry)
    async def delete(body: kopf.Body, **_) -> None:
        try:
            await hub.offboard(dict(body))
        except StillOnMember as waiting:
            raise kopf.TemporaryError(str(waiting), delay=min(retry_seconds, hub.config.fleet.poll_seconds)) from None
        except ApiError as error:
            raise kopf.TemporaryError(str(error), delay=10) from None


def _unheld_to_pools(rt: Cell):
    """Where the usage loop hands the GPU-memory sentinel's findings: the pool report's loop."""
    def hand_over(unheld) -> None:
        if rt.pools is not None:
            rt.pools.unheld_memory = unheld
    return hand_over


def start_loops(rt: Cell) -> None:
    """The background loops `prepare` asked for, the owned-kind watches and the release of memory
    passes no longer use, under the cell's supervisor (a loop that fails unexpectedly starts again
    `loop_seconds` later)."""
    elector, period = rt.elector, rt.loop_seconds
    if elector is not None:
        rt.loops.start("lease", lambda: elector.keep(on_lost=lambda: lost_lease(rt)), period)
    if rt.hub is not None:
        rt.loops.start("fleet", rt.hub.run, period)
        return
    if rt.config.fleet.role is FleetRole.MEMBER:
        rt.loops.start("fleet-report", lambda: keep_reporting(rt.client, rt.config), period)
    if rt.pools_interval_seconds > 0:
        pools = rt.pools = PoolsLoop(rt.client, rt.config, rt.metrics, rt.pools_interval_seconds, period, rt.attestor)
        rt.loops.start("pools", pools.run, period)
    if rt.prometheus_url:
        url = rt.prometheus_url
        rt.loops.start("usage", lambda: keep_usage(rt.client, rt.config, rt.metrics, url, rt.usage_window, period,
                                                   on_unheld=_unheld_to_pools(rt)), period)
    if rt.watch_owned:
        start_owned_watches(rt)
    rt.loops.start("memory", lambda: keep_memory_released(lambda: rt.queue.finished), period)
    if rt.attestor is not None:
        attestor = rt.attestor
        rt.loops.start("attestation", lambda: keep_attestation(rt.client, rt.config, attestor, period),
                       period)
