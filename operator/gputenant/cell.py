"""One cell: everything that talks to one host cluster, built from one kubeconfig (`build_cell`):
the API client, the Helm releases and the reconciler on them, the admission guard's process, the
loops, and what the cell's kopf handlers share (a lock per tenant, the reconcile slots, the looks
again, kopf's bookkeeping kept in the process); and how a full pass, a look again and a drift check
of a tenant run on them. Nothing of it reads the process environment for its cluster: two cells in
one process drive two host clusters (`handlers.register` wires one into its own kopf registry;
e2e/tests/test_two_cells.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import kopf

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
from gputenant.reconcile.deletion import hold_if_prevented, offboard_tenant
from gputenant.reconcile.pipeline import Outcome, Reconciler
from gputenant.reconcile.rechecks import Rechecks
from gputenant.reconcile_slots import ReconcileSlots, Urgency

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
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    pools: PoolsLoop | None = None
    """The GPU pools loop and its last report; None while it does not run."""
    loops: Supervisor = field(default_factory=Supervisor)
    reconcile_slots: ReconcileSlots = field(default_factory=lambda: ReconcileSlots(default_reconcile_concurrency()))
    """Pipeline runs in flight across all tenants (`gputenant run --reconcile-concurrency`), looks again
    first, drift checks last (`gputenant.reconcile_slots`)."""
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
    rechecks: Rechecks = field(init=False)
    """Looks again at tenants that wait (their control plane starting), outside kopf's retries."""
    full_passes_waiting: dict[str, int] = field(default_factory=dict)
    """Full passes of each tenant asked for and not yet started (waiting for its lock or a slot)."""
    full_pass_began: dict[str, float] = field(default_factory=dict)
    """When (event loop time) the last full pass of each tenant began."""
    passes: set[asyncio.Task] = field(default_factory=set)
    """The tasks in a pass or waiting to start one, cancelled when the operator stops (`stop_passes`)."""
    stopping: bool = False
    """Set by `stop_passes`: no pass starts any more."""

    def __post_init__(self) -> None:
        self.rechecks = Rechecks(self.look_again, lock=self.lock)

    def with_indexes(self, handler_kwargs: dict) -> Cell:
        """The cell, with the indexes kopf passed a handler handed over to its passes first
        (`reconcile.cache.WatchCache`)."""
        self.reconciler.services.cache.hand_over(handler_kwargs)
        return self

    async def offboard(self, body: dict) -> None:
        """The tenant's deletion path: DeletionHeld while spec.preventDeletion is true, else its
        objects and release removed under its lock, and what the cell keeps of it forgotten.
        StepError or ApiError: try again later."""
        await hold_if_prevented(self.client, body)
        name = body["metadata"]["name"]
        async with self.lock(name):
            await offboard_tenant(self.client, self.reconciler.releases, self.config, body)
        self.forget(name, body["metadata"].get("uid"))

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
            self.diffbase.forget(uid)
            self.progress.forget(uid)
        self.rechecks.forget(name)
        self.full_pass_began.pop(name, None)
        self.metrics.forget_tenant(name)

    async def reconcile(self, body: kopf.Body | dict) -> Outcome:
        """One full pipeline run for the tenant (a new tenant, a spec change, an annotation, a restart);
        a tenant that waits is looked at again by `rechecks`."""
        outcome = await self._full_pass(body, Urgency.CHANGE)
        assert outcome is not None  # only a drift check is ever left out
        return outcome

    async def drift_check(self, body: kopf.Body | dict) -> None:
        """The drift timer's pass, unless a full pass of the tenant is already waiting to start or
        started while this one waited for its slot: that pass reads everything after this moment,
        which is all the timer's pass would do. While many tenants onboard at once, their passes
        wait for slots longer than the first timer period, and drift checks wait behind them."""
        name = body["metadata"]["name"]
        if self.full_passes_waiting.get(name):
            log.debug("tenant %s: drift check left to the full pass waiting to start", name)
            return
        await self._full_pass(body, Urgency.DRIFT, unless_begun_since=asyncio.get_running_loop().time())

    async def _full_pass(self, body: kopf.Body | dict, urgency: Urgency,
                         unless_begun_since: float | None = None) -> Outcome | None:
        """A pass once it holds a reconcile slot, then the tenant's lock. In that order, a pass waiting
        for its slot holds no lock that a more urgent pass of the same tenant would wait behind; the
        price is a slot held while a pass waits for its tenant's lock behind another pass of that
        tenant. None when `unless_begun_since` is given and a full pass of the tenant began after it."""
        name = body["metadata"]["name"]
        self.full_passes_waiting[name] = self.full_passes_waiting.get(name, 0) + 1
        started = False
        try:
            async with self._stoppable(), self.reconcile_slots.slot(urgency), self.lock(name):
                started = True
                self._started(name)
                if unless_begun_since is not None and self.full_pass_began.get(name, -1.0) > unless_begun_since:
                    log.debug("tenant %s: drift check left out, a full pass began after it was asked", name)
                    return None
                self.full_pass_began[name] = asyncio.get_running_loop().time()
                outcome = await self.reconciler.reconcile(dict(body))
                self.rechecks.judged(name, outcome)
        finally:
            if not started:
                self._started(name)
        self.rechecks.follow(name, outcome.wait_after)
        return outcome

    async def stop_passes(self) -> None:
        """Start no pass from now on and cancel every pass running or waiting to start, before the
        operator closes its client: a pass whose requests the closing client aborts would write them
        into the tenant's status as the API server failing. The next process runs each tenant's
        pipeline once (on.resume) and finds it as the cancelled pass left it."""
        self.stopping = True
        await self.rechecks.close()
        tasks = list(self.passes)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def _stoppable(self) -> AsyncIterator[None]:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a tenant pass runs in a task")
        if self.stopping:
            raise asyncio.CancelledError("the operator is stopping")
        self.passes.add(task)
        try:
            yield
        finally:
            self.passes.discard(task)

    def _started(self, name: str) -> None:
        left = self.full_passes_waiting.get(name, 0) - 1
        if left > 0:
            self.full_passes_waiting[name] = left
        else:
            self.full_passes_waiting.pop(name, None)

    async def look_again(self, name: str) -> Outcome | None:
        """`rechecks`' pass: the tenant as it is now (`Reconciler.current`, under its lock, so its status
        is the last pass's) reconciled as a look again; None when it is gone or being deleted."""
        async with self._stoppable(), self.reconcile_slots.slot(Urgency.FINISH), self.lock(name):
            body = await self.reconciler.current(name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return None
            outcome = await self.reconciler.reconcile(body, recheck=True)
            self.rechecks.judged(name, outcome)
        self.rechecks.follow(name, outcome.wait_after)
        return outcome


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
        reconcile_slots=ReconcileSlots(settings.reconcile_concurrency or default_reconcile_concurrency()))
