"""One cell: everything that talks to one host cluster, built from one kubeconfig (`build_cell`):
the API client, the Helm releases and the reconciler on them, the admission guard's process, the
loops, the tenants' work queue, and kopf's bookkeeping kept in the process. Nothing of it reads the
process environment for its cluster: two cells in one process drive two host clusters
(`handlers.register` wires one into its own kopf registry; e2e/tests/test_two_cells.py).

A pass of a tenant runs only from the cell's work queue (`gputenant.work_queue`): kopf's handlers,
the drift timer and the control-plane watch add the tenant's name; the queue's worker reads the
tenant once (`Reconciler.current`), runs the pipeline and requeues it once when the pass asks to
(a wait: a look again; a failure: a full pass after its backoff)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from gputenant.attestation.run import Attestor
from gputenant.config.models import OperatorConfig
from gputenant.config.settings import OperatorSettings
from gputenant.guard.standalone import GuardProcess
from gputenant.kopf_state import ProcessDiffBase, ProcessProgress
from gputenant.kube import KubeClient
from gputenant.kube.lease import LeaseElector
from gputenant.loops import Supervisor
from gputenant.loops.pools import PoolsLoop
from gputenant.metrics import OperatorMetrics
from gputenant.reconcile.controlplane import PodSignature
from gputenant.reconcile.deletion import hold_if_prevented, offboard_tenant
from gputenant.reconcile.pipeline import Reconciler
from gputenant.reconcile.rechecks import Rechecks
from gputenant.work_queue import Requeue, TenantQueue, Urgency

log = logging.getLogger(__name__)


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
    deletion_retry_seconds: float
    kubeconfig: str | None = None
    """The host cluster's kubeconfig file, which every client of the cell is built from; None: the
    in-cluster service account."""
    pools_interval_seconds: float = 0.0
    """How often the GPU pools are applied; 0: never (no pools, or turned off)."""
    guard: GuardProcess | None = None
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

    def __post_init__(self) -> None:
        self.queue = TenantQueue(self.run_pass, self.reconcile_workers)

    def with_indexes(self, handler_kwargs: dict) -> Cell:
        """The cell, with the indexes kopf passed a handler handed over to its passes first
        (`reconcile.cache.WatchCache`)."""
        self.reconciler.services.cache.hand_over(handler_kwargs)
        return self

    def enqueue(self, name: str, urgency: Urgency) -> None:
        """A pass of tenant `name`: CHANGE for a new tenant, a spec change, an annotation or a restart;
        DRIFT for the timer; FINISH for a look again."""
        self.queue.add(name, urgency)

    async def control_plane_changed(self, name: str, pod: str, signature: PodSignature) -> None:
        """The tenant's control-plane pod `pod` started or stopped serving (the pod watch): a look
        again now, unless the pass in flight or the last pass already judged it as it is now."""
        changed_at = time.monotonic()
        await self.queue.idle(name)
        if self.rechecks.is_news(name, pod, signature, changed_at):
            self.queue.add(name, Urgency.FINISH)

    async def run_pass(self, name: str, urgency: Urgency) -> Requeue | None:
        """The queue's pass of tenant `name`: the tenant as it is now, reconciled (a FINISH pass as
        a look again, which leaves converged object steps alone); what to do next. Nothing when it
        is gone or being deleted."""
        body = await self.reconciler.current(name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.rechecks.forget(name)
            return None
        outcome = await self.reconciler.reconcile(body, recheck=urgency is Urgency.FINISH, current=True)
        self.rechecks.judged(name, outcome)
        if outcome.retry_after is not None:
            return Requeue(outcome.retry_after, Urgency.CHANGE)
        delay = self.rechecks.follow(name, outcome.wait_after)
        return Requeue(delay, Urgency.FINISH) if delay is not None else None

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
        reconcile_workers=settings.reconcile_concurrency or default_reconcile_concurrency())
