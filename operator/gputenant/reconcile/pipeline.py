"""One idempotent pipeline for create, resume, update and the resync.

spec -> validated model -> policy decision -> rendered objects -> the steps of `steps.STEPS` ->
status. Each step sets its condition; a step that fails sets it False with a named reason and stops
the steps after it (they keep their last condition). Writes happen only where the live state
differs, and status is patched only when it changed, so a resync of an unchanged tenant writes
nothing. No failure inside a pass escapes it: a transient one (the API server away, Helm busy)
becomes a condition and a backoff, a permanent one a condition that waits for the input to change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gputenant import KIND
from gputenant.api import conditions as reasons
from gputenant.api.fieldpath import validation_problems
from gputenant.api.hub import GpuTenant, GpuTenantSpec, GrantedStatus, QueueGrantStatus, SharingStatus
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.kubeconfigs import token_lifetime
from gputenant.metrics import HELM_SKIP, PREPARE_STEP, SUCCESS, OperatorMetrics, TenantFigures, step_label
from gputenant.policy.decision import Decision
from gputenant.reconcile.context import Outcome, Pass, Plan, Services, backoff
from gputenant.reconcile.events import API_VERSION
from gputenant.reconcile.memory import TenantMemory
from gputenant.reconcile.ownership import adopt
from gputenant.reconcile.ports import KubeconfigIssuer, Releases, StepError
from gputenant.reconcile.steps import STEPS, condition_of
from gputenant.reconcile.view import publish_view
from gputenant.reconcile.wake import read_request, run_as
from gputenant.render import RenderError
from gputenant.tenant_status import conditions as cond
from gputenant.tenant_status.fields import (
    comparable,
    pipeline_part,
    split_merge_patched_status,
    status_body,
    whole_status,
)
from gputenant.tenant_status.writers import write_pipeline
from gputenant.timefmt import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

STATUS_WRITE = "status"
"""The 'step' a failed status write counts its consecutive failures under."""

__all__ = ["API_VERSION", "Outcome", "Reconciler"]


class Reconciler:
    """Runs the pipeline for one tenant body at a time; safe to call again at any point."""

    def __init__(self, client: KubeClient, config: OperatorConfig, releases: Releases,
                 issuer: KubeconfigIssuer, *, decide: Callable[..., Decision] | None = None,
                 render: Callable[..., Any] | None = None, clock: Callable[[], datetime] | None = None,
                 metrics: OperatorMetrics | None = None):
        self.client = client
        self.config = config
        self.releases = releases
        self.memory = TenantMemory()
        self.services = Services(client, config, releases, issuer, self.memory)
        self._decide = decide
        self._render = render
        self.clock = clock or (lambda: datetime.now(UTC))
        self.metrics = metrics or OperatorMetrics()

    def decide(self, name: str, spec: GpuTenantSpec) -> Decision:
        if self._decide is None:
            from gputenant.policy.choose import decide
            self._decide = decide
        return self._decide(name, spec, self.config)

    def render(self, tenant: GpuTenant, decision: Decision) -> Any:
        if self._render is None:
            from gputenant.render import render_tenant
            self._render = render_tenant
        return self._render(tenant, decision, self.config)

    def forget(self, uid: str) -> None:
        """Drop what the reconciler remembers about a deleted tenant."""
        self.memory.forget(uid)

    async def reconcile(self, body: dict, *, recheck: bool = False, current: bool = False) -> Outcome:
        """Run the pipeline once. The backoff after a failure counts the consecutive failures of the
        same step (remembered per tenant), never how often a pass was asked for: waits are not failures.
        `current`: `body` is the tenant as `current` read it (its status the newest there is), so it
        is not read again. `recheck`: a look again at a tenant that waits (its control plane
        starting), which leaves alone the object steps that ended in place on the same rendered
        objects at an earlier pass; drift in them is the resync's to find, as it is between
        passes anyway."""
        started = time.perf_counter()
        metadata = body["metadata"]
        if not (recheck or current) and self.memory.knows(metadata["name"], metadata.get("uid") or ""):
            try:
                body = await self.with_current_status(body)
            except ApiError as error:
                log.warning("tenant %s: reading its current status failed, using the event's: %s",
                            body["metadata"]["name"], error)
        run = Pass(self.services, body, self.clock(), recheck=recheck)
        if run.uid:
            self.memory.seen(run.name, run.uid)
        condition, step_name = STEPS[0].condition, PREPARE_STEP
        try:
            with self.metrics.timing_step(PREPARE_STEP):
                run.follow(self.plan(run, await read_request(run)))
                record_decision(run)
            for step in STEPS:
                condition, step_name = step.condition, step_label(step.condition)
                digest = rendered_digest(run.plan.rendered.get(condition)) if step.objects_only else None
                if recheck and digest and self.memory.converged(run.uid, condition, digest) \
                        and true_at_generation(run, condition):
                    run.outcome.skipped.append(condition)
                    continue
                with self.metrics.timing_step(step_name):
                    going_on = await step.ensure(run)
                if step.objects_only:
                    self.memory.note_step(run.uid, condition, digest if true_at_generation(run, condition) else None)
                if condition == reasons.VCLUSTER_READY and not run.outcome.helm_calls:
                    self.metrics.helm_operation(HELM_SKIP, SUCCESS)
                if not going_on:
                    break
        except StepError as error:
            self.metrics.step_failed(step_name, error.reason)
            fail(run, condition, error)
        except ApiError as error:
            reason = reasons.API_UNAVAILABLE if error.transient else reasons.APPLY_REJECTED
            self.metrics.step_failed(step_name, reason)
            fail(run, condition, StepError(reason, str(error), error.transient))
        await finish(run)
        if run.outcome.retry_after is None:
            self.memory.clear_failures(run.uid)
        if run.outcome.wait_after is not None:
            log_wait(run)
        self.metrics.pass_finished(run.name, pass_result(run), time.perf_counter() - started, tenant_figures(run))
        return run.outcome

    def plan(self, run: Pass, wake_request: str = "") -> Plan:
        """Validate, decide and render before anything is applied, so a spec that fails any of them
        changes nothing (its reason lands on the first step's condition). An owner's wake request
        (`wake_request`) that holds renders the tenant awake."""
        try:
            tenant = GpuTenant.from_body(run.body)
            lifetime = token_lifetime(tenant.spec.kubeconfig.token_lifetime)
        except (ValidationError, ValueError) as error:
            raise StepError(reasons.INVALID_SPEC, _validation_message(error), transient=False) from None
        tenant, woken_on_request = run_as(run, tenant, wake_request)
        decision = self.decide(run.name, tenant.spec)
        try:
            made = self.render(tenant, decision)
        except (RenderError, ValueError) as error:
            raise StepError(reasons.RENDER_FAILED, f"{error}; nothing was applied", transient=False) from None
        rendered: dict[str, list[dict]] = {}
        for obj in made.objects:
            rendered.setdefault(condition_of(obj["kind"]), []).append(adopt(obj, run.body, run.host_namespace))
        return Plan(tenant, lifetime, decision, made.vcluster_values, rendered, woken_on_request)

    async def with_current_status(self, body: dict) -> dict:
        """`body` with the tenant's live status. kopf hands a retry or a timer a body that can be older
        than the status the previous pass wrote; trusting it repeated the Helm check (3 helm
        processes), every condition's Event and the status patch for each new tenant
        (docs/performance.md, hot spot 1). One GET is cheaper than any of those. Asked only after
        a pass of this process (`TenantMemory.knows`): before it, no write of ours can be newer. Not
        read at all when `body`, or the tenant in the operator's index, is the very version our last
        status write made (`TenantMemory.is_last_written`)."""
        if self.memory.is_last_written(body):
            return body
        live = await self.current(body["metadata"]["name"])
        if live is None or live["metadata"].get("uid") != body["metadata"].get("uid"):
            return body
        return {**body, "status": live.get("status") or {}}

    async def current(self, name: str) -> dict | None:
        """The tenant as it is now, read once per pass: from the operator's index when no pass of
        this process ran for it yet (no write of ours can be newer) or when it is the very version
        the last status write of this process made (nothing changed it since), else read; None when
        gone."""
        cached = self.services.cache.tenant(name)
        if cached is not None:
            uid = cached["metadata"].get("uid") or ""
            if not self.memory.knows(name, uid) or self.memory.is_last_written(cached):
                return cached
        return await self.client.get(API_VERSION, KIND, name)


def true_at_generation(run: Pass, condition_type: str) -> bool:
    found = cond.find(run.conditions, condition_type)
    return found is not None and found.status == cond.ConditionStatus.TRUE and found.observed_generation == run.generation


def rendered_digest(objects: list[dict] | None) -> str | None:
    """A digest of one step's rendered objects; None when it has none (nothing to leave alone)."""
    if not objects:
        return None
    return hashlib.sha256(json.dumps(objects, sort_keys=True, default=str).encode()).hexdigest()


def record_decision(run: Pass) -> None:
    """The policy's decision in status: namespace, sharing and what was granted."""
    decision = run.plan.decision
    queue = decision.queue
    run.status.namespace = run.host_namespace
    run.status.sharing = SharingStatus(mode=decision.mode, pool=decision.pool.name if decision.pool else None,
                                       reason=decision.message)
    run.status.granted = GrantedStatus(resources=dict(decision.quota), queue=QueueGrantStatus(
        name=queue.name, parent=queue.parent, quota=queue.quota, limit=queue.limit,
        over_quota_weight=queue.over_quota_weight, priority=queue.priority) if queue else None)


def fail(run: Pass, condition: str, error: StepError) -> None:
    """The step's condition False with the error's reason; a transient error asks for a retry with
    backoff, a permanent one waits for the input to change."""
    run.set(condition, False, error.reason, error.message)
    if error.transient:
        run.retry_later(condition)
    else:
        run.outcome.permanent_failure = error.reason


async def finish(run: Pass) -> None:
    """Ready from the parts, Events for what changed, and the status write when it differs. A
    failed write (the API server away) is a warning and a retry, never an escaped error."""
    ready_status, reason, message = cond.summarise_ready(run.conditions)
    run.conditions = cond.set_condition(run.conditions, reasons.READY, ready_status, reason, message,
                                        run.generation, rfc3339(run.now))
    run.outcome.ready = ready_status == cond.ConditionStatus.TRUE
    run.outcome.applied = list(run.applier.result.applied)
    new_status = status_body(run.status, run.conditions, run.generation)
    drifted = [key for key in run.outcome.applied if key not in run.rotated]
    if drifted and was_ready_at_this_generation(run):
        await run.event("Warning", reasons.DRIFT_REPAIRED, "re-applied objects that were changed or deleted: "
                        + ", ".join(f"{k}/{n}" for _, k, _, n in drifted))
    for kind, reason, message in cond.transition_events(cond.parse(run.old_status.get("conditions") or []),
                                                        run.conditions):
        await run.event(kind, reason, message)
    await publish_view(run, whole_status(run.status, run.conditions, run.generation))
    await release_merge_patched_status(run)
    if comparable(new_status) == comparable(pipeline_part(run.old_status)):
        return
    try:
        written = await write_pipeline(run.client, run.name, new_status)
    except ApiError as error:
        if error.transient:
            run.retry_later(STATUS_WRITE)
        else:
            run.outcome.retry_after = backoff(6)
        log.warning("tenant %s: writing its status failed, retrying in %gs: %s", run.name, run.outcome.retry_after,
                    error)
        return
    run.outcome.status_written = True
    run.services.memory.status_written(run.uid, ((written or {}).get("metadata") or {}).get("resourceVersion"))


async def release_merge_patched_status(run: Pass) -> None:
    """Once per tenant and process: hand the status fields that an operator before server-side apply
    of status wrote by merge patch to the writers that own them now, so what a writer stops applying
    goes. Settled by the first pass that starts from a body with managedFields (kopf's; the index
    keeps none) and finds nothing to hand or hands it; a failure (the tenant changed since kopf's
    body) waits for the next such pass."""
    memory = run.services.memory
    managed_fields = run.body["metadata"].get("managedFields")
    if memory.ownership_settled(run.uid) or managed_fields is None:
        return
    entries = split_merge_patched_status(managed_fields, run.client.user_agent, run.client.field_manager)
    if entries is not None:
        try:
            await run.client.replace_managed_fields(API_VERSION, KIND, run.body, entries)
        except ApiError as error:
            log.info("tenant %s: the merge patches' status ownership stays until the next pass: %s", run.name, error)
            return
        log.info("tenant %s: the status fields of merge patches handed to their writers' field managers", run.name)
    memory.settle_ownership(run.uid)


def log_wait(run: Pass) -> None:
    """A normal wait is INFO when what the tenant waits for changed, DEBUG while it stays the same."""
    ready = cond.find(run.conditions, reasons.READY)
    before = cond.find(cond.parse(run.old_status.get("conditions") or []), reasons.READY)
    message = ready.message if ready else None
    level = logging.DEBUG if before and before.message == message else logging.INFO
    log.log(level, "tenant %s waits (%s: %s); looking again in %gs", run.name, ready.reason if ready else None,
            message, run.outcome.wait_after)


def pass_result(run: Pass) -> str:
    """The `result` label of a finished pass."""
    if run.outcome.ready:
        return "ready"
    if run.outcome.permanent_failure:
        return "failed"
    return "retrying" if run.outcome.retry_after is not None else "not_ready"


def tenant_figures(run: Pass) -> TenantFigures:
    """The tenant's phase (its Ready condition) and earliest kubeconfig expiry, for the metrics."""
    ready = cond.find(run.conditions, reasons.READY)
    phase = {"True": "Ready", "False": "NotReady"}.get(ready.status.value if ready else "", "Unknown")
    expiries = [moment for moment in (parse_rfc3339(k.expires_at) for k in run.status.kubeconfigs) if moment]
    return TenantFigures(phase, ready.reason if ready else "", min(expiries, default=None))


def was_ready_at_this_generation(run: Pass) -> bool:
    ready = cond.find(cond.parse(run.old_status.get("conditions") or []), reasons.READY)
    return bool(ready and ready.status == cond.ConditionStatus.TRUE and run.old_status.get("observedGeneration") == run.generation)


def _validation_message(error: Exception) -> str:
    """Each problem with the field path it is at, e.g. 'spec.gpu.quota: must be >= 0'."""
    if isinstance(error, ValidationError):
        return "; ".join(validation_problems(error))
    return str(error)
