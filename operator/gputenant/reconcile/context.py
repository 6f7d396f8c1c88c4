"""The state of one reconcile pass, handed to each step: the tenant and what the policy and the
renderer made of it, the clients, the status being built, and what the caller should do next."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gputenant import naming
from gputenant.api.hub import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.kube import Applier, KubeClient, LiveSnapshot
from gputenant.policy.decision import Decision
from gputenant.reconcile.cache import WatchCache
from gputenant.reconcile.controlplane import PodSignature
from gputenant.reconcile.events import post_event
from gputenant.reconcile.memory import RETRY_ANNOTATION, TenantMemory
from gputenant.reconcile.ports import KubeconfigIssuer, Releases
from gputenant.tenant_status import conditions as cond
from gputenant.tenant_status.fields import carried_status
from gputenant.timefmt import rfc3339

MAX_BACKOFF_SECONDS = 300.0


@dataclass
class Outcome:
    """What the caller (kopf) should do next."""

    ready: bool = False
    retry_after: float | None = None
    """Seconds until the next attempt after a failure (the backoff of the failing step's consecutive
    failures); None: no failure to retry (done, waiting, or stopped until an input changes)."""
    wait_after: float | None = None
    """Seconds until the operator looks again at a tenant that waits for something normal (its
    control plane starting, pods stopping); not a failure, so no backoff and no kopf retry."""
    permanent_failure: str | None = None
    applied: list = field(default_factory=list)
    status_written: bool = False
    helm_calls: int = 0
    skipped: list[str] = field(default_factory=list)
    """Object steps a look again left alone: in place on the same rendered objects at the last pass."""
    due_after: float | None = None
    """Seconds until something of the tenant falls due with no event to announce it (a kubeconfig
    token to rotate, a wake to end): the pass to run then, however rare the resync."""
    control_plane_read_at: float | None = None
    """When (time.monotonic) the vCluster step sent its listing of the control plane's pods; None:
    it did not. A control-plane pod change seen before then is judged by this pass."""
    control_plane_pods: dict[str, PodSignature] = field(default_factory=dict)
    """The control-plane pods the pass judged, each as `controlplane.pod_signature` saw it."""


@dataclass(frozen=True)
class Services:
    """What every pass uses and no pass owns."""

    client: KubeClient
    config: OperatorConfig
    releases: Releases
    issuer: KubeconfigIssuer
    memory: TenantMemory
    cache: WatchCache = field(default_factory=WatchCache)


@dataclass(frozen=True)
class Plan:
    """What a pass applies, made whole before its first step (`Reconciler.plan`): a spec that
    fails validation, the policy or the renderer has no plan, and its pass applies nothing."""

    tenant: GpuTenant
    """The tenant as the pass runs it: awake while an owner's wake request holds."""
    lifetime: timedelta
    """How long an issued kubeconfig lives (spec.kubeconfig.tokenLifetime)."""
    decision: Decision
    vcluster_values: dict
    rendered: dict[str, list[dict]]
    """Rendered objects by the condition of the step that applies them, owned by the tenant."""
    woken_on_request: bool = False
    """An owner's wake request holds (`reconcile.wake`): the spec says asleep, the pass runs it awake."""


class Pass:
    """One run of the steps for one tenant body."""

    admin_kubeconfig: dict | None = None
    """Set by the vCluster step once the control plane wrote it; the steps after it need it."""

    def __init__(self, services: Services, body: dict, now: datetime, *, recheck: bool = False):
        self.services = services
        self.recheck = recheck
        """A look again at a tenant that waits (``Reconciler.reconcile``)."""
        self.client = services.client
        self.config = services.config
        self.body = body
        self.now = now
        metadata = body["metadata"]
        self.name: str = metadata["name"]
        self.uid: str = metadata.get("uid") or ""
        self.generation: int | None = metadata.get("generation")
        self.annotations: dict[str, str] = metadata.get("annotations") or {}
        self.old_status: dict[str, Any] = dict(body.get("status") or {})
        self.status = carried_status(self.old_status)
        self.conditions: list[cond.Condition] = cond.parse(self.old_status.get("conditions") or [])
        self.host_namespace = naming.host_namespace(self.name, services.config)
        self.snapshot = LiveSnapshot(services.client, f"{naming.TENANT_LABEL}={self.name}")
        self.applier = Applier(services.client, self.snapshot)
        self._plan: Plan | None = None
        self.rotated: list[tuple[str, str, str, str]] = []
        """Token Secrets re-issued on schedule or request: applied, but not drift."""
        self.outcome = Outcome()
        self._events_failed = False
        self._host_pods: list[dict] | None = None
        self.host_pods_read_at: float | None = None
        """When the pass read the host namespace's pods (monotonic): the index, or its LIST sent."""

    @property
    def plan(self) -> Plan:
        """The pass's plan; the steps run only once there is one."""
        if self._plan is None:
            raise RuntimeError(f"tenant {self.name}: the pass has no plan (its spec failed before any step)")
        return self._plan

    @property
    def planned(self) -> bool:
        return self._plan is not None

    def follow(self, plan: Plan) -> None:
        """The plan the steps apply, set once, before the first step."""
        if self._plan is not None:
            raise RuntimeError(f"tenant {self.name}: the pass already has a plan")
        self._plan = plan

    @property
    def never_reconciled(self) -> bool:
        """No pass wrote the tenant's status yet (no observedGeneration): nothing of the operator's
        exists for it but what this pass writes, so what only finds leftovers need not be read."""
        return self.old_status.get("observedGeneration") is None

    @property
    def rotation_request(self) -> str:
        return self.annotations.get(naming.ROTATE_ANNOTATION, "")

    @property
    def revocation_request(self) -> str:
        return self.annotations.get(naming.REVOKE_ANNOTATION, "")

    @property
    def retry_request(self) -> str:
        return self.annotations.get(RETRY_ANNOTATION, "")

    async def host_pods(self) -> list[dict]:
        """Every pod of the host namespace, read once per pass (from the operator's pod index, else
        listed): the vCluster step judges its control plane's among them, the tenant's view all of
        them."""
        if self._host_pods is None:
            self.host_pods_read_at = time.monotonic()
            self._host_pods = await self.services.cache.pods_in(
                self.host_namespace, lambda: self.client.list("v1", "Pod", namespace=self.host_namespace))
        return self._host_pods

    def set(self, condition_type: str, ok: bool | None, reason: str, message: str) -> None:
        self.conditions = cond.set_condition(self.conditions, condition_type, cond.status_of(ok), reason, message,
                                             self.generation, rfc3339(self.now))

    def retry_later(self, step: str) -> None:
        """`step` (its condition type) failed: run again after the backoff of its consecutive
        failures (5 s after the first)."""
        self.outcome.retry_after = backoff(self.services.memory.count_failure(self.uid, step) - 1)

    def due(self, moment: datetime | None) -> None:
        """Something falls due at `moment` (None: nothing known): run again then at the latest."""
        if moment is None:
            return
        seconds = max(1.0, (moment - self.now).total_seconds())
        self.outcome.due_after = min(seconds, self.outcome.due_after or seconds)

    def wait(self, seconds: float) -> None:
        """Look again after `seconds`: something normal is under way (not a failure)."""
        self.outcome.wait_after = min(seconds, self.outcome.wait_after or seconds)

    async def event(self, event_type: str, reason: str, message: str) -> None:
        """Best effort; once one Event could not be posted, the pass posts no more (one warning, not
        one per condition)."""
        if self._events_failed:
            return
        self._events_failed = not await post_event(self.client, self.body, event_type, reason, message, self.now)


def backoff(earlier_failures: int) -> float:
    """5 s doubling per earlier consecutive failure, at most 5 minutes."""
    return min(MAX_BACKOFF_SECONDS, 5.0 * 2 ** min(earlier_failures, 6))
