"""One cell: everything that talks to one host cluster, built from one kubeconfig (`build_cell`):
the API client, the Helm releases and the reconciler on them, the admission guard's process, the
loops, the tenants' work queue, and kopf's bookkeeping kept in the process. Nothing of it reads the
process environment for its cluster: two cells in one process drive two host clusters
(`handlers.register` wires one into its own kopf registry; e2e/tests/test_two_cells.py).

A pass of a tenant runs only from the cell's work queue (`gputenant.work_queue`): kopf's handlers
and the watches add the tenant's name; the queue's worker reads the tenant once
(`Reconciler.current`), runs the pipeline and requeues it once: a wait, a look again; a failure, a
full pass after its backoff; else its resync, when something falls due or a period after its last
resync, whichever is first. The resync is that requeue, not a kopf timer: a timer is a task per
tenant holding the tenant's whole body in kopf's memory."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from gputenant.attestation.run import Attestor
from gputenant.config.models import OperatorConfig
from gputenant.config.settings import OperatorSettings
from gputenant.fleet.hub import Hub
from gputenant.guard.standalone import GuardProcess
from gputenant.kopf_state import ProcessDiffBase, ProcessProgress
from gputenant.kube import KubeClient
from gputenant.kube.lease import LeaseElector
from gputenant.kube.watch import Reflector
from gputenant.loops import Supervisor
from gputenant.loops.pools import PoolsLoop
from gputenant.metrics import OperatorMetrics
from gputenant.reconcile.controlplane import PodSignature
from gputenant.reconcile.deletion import hold_if_prevented, offboard_tenant
from gputenant.reconcile.pipeline import Reconciler
from gputenant.reconcile.rechecks import Rechecks
from gputenant.work_queue import Requeue, TenantQueue, Urgency

log = logging.getLogger(__name__)


VIEW_SETTLE_SECONDS = 2.0
"""How long a change of what a tenant's view shows waits for more before its look again."""


def default_reconcile_concurrency() -> int:
    """Reconciles mostly wait on the API and Helm; a few per core keeps every Helm slot busy
    without hundreds of tenants queueing for the client's connections at once."""
    return 8 * (os.cpu_count() or 1)


@dataclass
class Cell:
    config: OperatorConfig
    client: KubeClient
    reconciler: Reconciler
    resync_seconds: float
    """How often every tenant's whole pipeline runs as a safety net (drift is repaired on the change
    while the owned kinds are watched, `owned_watch`)."""
    deletion_retry_seconds: float
    kubeconfig: str | None = None
    """The host cluster's kubeconfig file, which every client of the cell is built from; None: the
    in-cluster service account."""
    pools_interval_seconds: float = 0.0
    """How often the GPU pools are applied; 0: never (no pools, or turned off)."""
    guard: GuardProcess | None = None
    hub: Hub | None = None
    """A fleet's hub (operator config fleet.role hub): places tenants on members instead of
    reconciling them; None on a member or a single host cluster."""
    pools: PoolsLoop | None = None
    """The GPU pools loop and its last report; None while it does not run."""
    loops: Supervisor = field(default_factory=Supervisor)
    reconcile_workers: int = field(default_factory=default_reconcile_concurrency)
    """Passes in flight at once across all tenants (`gputenant run --reconcile-concurrency`)."""
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    prometheus_url: str | None = None
    """Where the DCGM series are read for allocation against use (`gputenant run --prometheus-url`)."""
    usage_window: str = "1h"
    attestor: Attestor | None = None
    """Runs each pool's isolation canary and keeps the verdicts; None: attestation is off."""
    loop_seconds: float = 60.0
    """Between rounds of the usage, pools and attestation loops, and before a failed loop or watch
    starts again."""
    watch_owned: bool = True
    """Watch the kinds the operator writes for tenants (`owned_watch`)."""
    watch_owned_secrets: bool = True
    """... the owned Secrets among them."""
    owned: list[Reflector] = field(default_factory=list)
    """The owned-kind watches, once started."""
    guard_started: bool = False
    elector: LeaseElector | None = None
    """Set by `lead`: this replica holds the Lease and renews it while kopf runs."""
    diffbase: ProcessDiffBase = field(default_factory=ProcessDiffBase)
    progress: ProcessProgress = field(default_factory=ProcessProgress)
    """kopf's last handled essence and handler progress of each tenant, kept here rather than
    written to the tenant (`gputenant.kopf_state`)."""
    rechecks: Rechecks = field(default_factory=Rechecks)
    """When a waiting tenant is looked at again, and whether a control-plane change is news."""
    queue: TenantQueue = field(init=False)
    """The tenants' work queue: every pass runs from it."""
    resync_at: dict[str, float] = field(default_factory=dict)
    """When each tenant's next resync is due (`time.monotonic`), a period after its last."""

    def __post_init__(self) -> None:
        self.queue = TenantQueue(self.run_pass, self.reconcile_workers,
                                 failed_again=Requeue(self.resync_seconds, Urgency.DRIFT))

    def with_indexes(self, handler_kwargs: dict) -> Cell:
        """The cell, with the indexes kopf passed a handler handed over to its passes first
        (`reconcile.cache.WatchCache`)."""
        self.reconciler.services.cache.hand_over(handler_kwargs)
        return self

    def enqueue(self, name: str, urgency: Urgency) -> None:
        """A pass of tenant `name`: CHANGE for a new tenant, a spec change, an annotation or a restart;
        DRIFT for a resync; FINISH for a look again."""
        self.queue.add(name, urgency)

    def serves(self, name: str) -> bool:
        """Whether tenant `name` is one a pass would run for: in the operator's tenant index and not
        being deleted (True while there is no index yet: the pass itself finds out)."""
        cache = self.reconciler.services.cache
        if cache.tenants is None:
            return True
        body = cache.tenant(name)
        return body is not None and not body["metadata"].get("deletionTimestamp")

    def view_changed(self, name: str) -> None:
        """Something the tenant's view shows changed (a GPU pod, its usage, IsolationVerified): a look
        again within `VIEW_SETTLE_SECONDS`, which writes the view when it differs."""
        if self.serves(name):
            self.queue.add(name, Urgency.FINISH, after=VIEW_SETTLE_SECONDS)

    async def control_plane_changed(self, name: str, pod: str, signature: PodSignature) -> None:
        """The tenant's control-plane pod `pod` started or stopped serving (the pod watch): a look
        again now, unless the pass in flight or the last pass already judged it as it is now."""
        changed_at = time.monotonic()
        await self.queue.idle(name)
        if self.rechecks.is_news(name, pod, signature, changed_at):
            self.queue.add(name, Urgency.FINISH)

    async def run_pass(self, name: str, urgency: Urgency) -> Requeue | None:
        """The queue's pass of tenant `name`: the tenant as it is now, reconciled (a FINISH pass as
        a look again, which leaves converged object steps alone); what to do next: a retry, a look
        again, or the next resync (`resync_after`), in that order. Nothing when it is gone or being
        deleted."""
        body = await self.reconciler.current(name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.rechecks.forget(name)
            self.resync_at.pop(name, None)
            return None
        now = time.monotonic()
        if urgency is Urgency.DRIFT or name not in self.resync_at:
            self.resync_at[name] = now + self.resync_seconds
        outcome = await self.reconciler.reconcile(body, recheck=self.looks_again(urgency), current=True)
        self.rechecks.judged(name, outcome)
        if outcome.retry_after is not None:
            return Requeue(outcome.retry_after, Urgency.CHANGE)
        delay = self.rechecks.follow(name, outcome.wait_after)
        if delay is not None:
            return Requeue(delay, Urgency.FINISH)
        return Requeue(self.resync_after(name, outcome.due_after), Urgency.DRIFT)

    def resync_after(self, name: str, due_after: float | None) -> float:
        """Seconds until the tenant's next DRIFT pass: when something falls due (a token to rotate, a
        wake to end), or its resync, whichever is first. A pass at another urgency (a change, a look
        again) does not push the resync back."""
        until_resync = self.resync_at.get(name, time.monotonic() + self.resync_seconds) - time.monotonic()
        return max(0.0, min(until_resync, due_after if due_after is not None else until_resync))

    def looks_again(self, urgency: Urgency) -> bool:
        """Whether a pass at `urgency` leaves alone the object steps that converged in this process
        at the same rendered objects: a look again (FINISH) always; the resync's (DRIFT) too while
        the owned kinds are watched, since any change of those objects queues a full pass of its own
        (controller-runtime's resync likewise replays its caches, it does not list again)."""
        return urgency is Urgency.FINISH or (urgency is Urgency.DRIFT and self.watch_owned)

    async def offboard(self, body: dict) -> None:
        """The tenant's deletion path: DeletionHeld while spec.preventDeletion is true, else its
        objects and release removed while no pass of it runs, and what the cell keeps of it
        forgotten. StepError or ApiError: try again later."""
        await hold_if_prevented(self.client, body)
        name = body["metadata"]["name"]
        async with self.queue.exclusive(name):
            await offboard_tenant(self.client, self.reconciler.releases, self.config, body)
        self.forget(name, body["metadata"].get("uid"))

    def forget(self, name: str, uid: str | None) -> None:
        """Drop everything the cell keeps for a tenant that is gone, in one place."""
        self.queue.forget(name)
        self.rechecks.forget(name)
        self.resync_at.pop(name, None)
        if uid:
            self.reconciler.forget(uid)
            self.diffbase.forget(uid)
            self.progress.forget(uid)
        self.metrics.forget_tenant(name)

    async def stop_passes(self) -> None:
        """Start no pass from now on and cancel every pass in flight, before the operator closes its
        client (`TenantQueue.close`)."""
        await self.queue.close()


def build_cell(config: OperatorConfig, kubeconfig: str | None, settings: OperatorSettings,
               metrics: OperatorMetrics | None = None) -> Cell:
    """The cell of the host cluster `kubeconfig` names (None: in-cluster): its client and Helm both
    get the file itself. A concurrency the settings leave None is the default (helm: twice the
    cores, reconciles: eight times the cores); metrics None: a registry nobody serves."""
    from gputenant.helm import ChartRef, VClusterReleases, default_helm_path
    from gputenant.reconcile.adapters import HelmReleases, TokenKubeconfigs

    metrics = metrics or OperatorMetrics()
    client = KubeClient.from_kubeconfig(kubeconfig, config.field_manager)
    releases = HelmReleases(VClusterReleases(kubeconfig, helm_path=default_helm_path(settings.tools_dir),
                                             max_concurrent=settings.helm_concurrency, metrics=metrics),
                            ChartRef.from_config(config.vcluster))
    issuer = TokenKubeconfigs(config.field_manager)
    return Cell(
        config=config, client=client, reconciler=Reconciler(client, config, releases, issuer, metrics=metrics),
        metrics=metrics, kubeconfig=kubeconfig,
        resync_seconds=settings.resync_seconds, deletion_retry_seconds=settings.deletion_retry_seconds,
        loop_seconds=settings.loop_seconds or min(60.0, settings.resync_seconds),
        watch_owned=settings.watch_owned, watch_owned_secrets=settings.watch_owned_secrets,
        reconcile_workers=settings.reconcile_concurrency or default_reconcile_concurrency())
