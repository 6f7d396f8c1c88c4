"""Wake on request: a tenant's owners wake its sleeping vCluster without the platform team.

The owners (and nobody else: Role ``gputenant-wake``, bound to spec.owners only, may write exactly
one object) set ``data.request`` of ConfigMap ``gputenant-wake`` in the host namespace to any new
value. The next pass records it in ``status.wake`` and runs the tenant as if spec.sleep.asleep were
false until the wake ends; the spec is never written, so a spec kept in Git (Argo CD, Flux) that
says asleep shows no drift and nothing flaps. The wake ends no earlier than ``until`` (one
spec.sleep.idle.after, else `DEFAULT_WAKE`, after waking) and only once the GPUs have been idle that
long (status.usage); then the tenant falls asleep again as the spec says. A request the operator
has acted on never wakes it twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gputenant import naming
from gputenant.api.hub import GpuTenant, SleepSpec
from gputenant.api.status import UsageStatus, WakeStatus
from gputenant.kube import ApiError
from gputenant.reconcile.context import Pass
from gputenant.timefmt import parse_duration, parse_rfc3339, rfc3339

REQUEST_KEY = "request"
DEFAULT_WAKE = timedelta(hours=8)
"""How long a wake lasts at least when the tenant has no idle policy (spec.sleep.idle)."""


def wake_window(sleep: SleepSpec) -> timedelta:
    return (parse_duration(sleep.idle.after) if sleep.idle else None) or DEFAULT_WAKE


def next_wake(sleep: SleepSpec, request: str, current: WakeStatus | None, usage: UsageStatus | None,
              now: datetime) -> WakeStatus | None:
    """status.wake after this pass. Pure: `request` is the ConfigMap's data.request ("" if none)."""
    window = wake_window(sleep)
    if request and (current is None or request != current.request):
        if not sleep.asleep:  # awake anyway; remembered so that it does not wake a later sleep
            return WakeStatus(request=request)
        return WakeStatus(request=request, woken_at=rfc3339(now), until=rfc3339(now + window))
    if current is None or current.until is None:
        return current
    if not sleep.asleep:  # spec woke it: the wake has nothing left to do
        return WakeStatus(request=current.request)
    until, woken = parse_rfc3339(current.until), parse_rfc3339(current.woken_at) or now
    if until is None or now < until:
        return current
    idle_since = parse_rfc3339(usage.all_idle_since) if usage else None
    if usage is None or usage.gpus_held == 0:
        idle_since = woken
    if idle_since is not None and now - max(idle_since, woken) >= window:
        return WakeStatus(request=current.request, woken_at=current.woken_at)
    later = max(idle_since, woken) + window if idle_since else now + window
    return current.model_copy(update={"until": rfc3339(later)})


def woken(wake: WakeStatus | None) -> bool:
    return wake is not None and wake.until is not None


def as_awake(tenant: GpuTenant) -> GpuTenant:
    """The tenant as the pass runs it while a wake holds: spec.sleep.asleep false."""
    spec = tenant.spec.model_copy(update={"sleep": tenant.spec.sleep.model_copy(update={"asleep": False})})
    return tenant.model_copy(update={"spec": spec})


async def read_request(run: Pass) -> str:
    """The owners' request, from the snapshot of the tenant's labelled ConfigMaps (the LIST the view
    reuses), "" when there is none or the namespace is not there yet. Under the chart's least
    privilege the operator may read the namespace only once its own RoleBinding there exists (the
    namespace step writes it, after this); until then no request can exist either. Before any pass
    wrote the tenant's status (no observedGeneration) it is not read at all: the first pass is the
    one that creates the namespace and the owners' Role to write the request, and the pass after it
    reads whatever they wrote since."""
    if run.never_reconciled:
        return ""
    try:
        found = await run.snapshot.lookup("v1", "ConfigMap", naming.WAKE_CONFIGMAP, run.host_namespace)
    except ApiError as error:
        if error.forbidden and run.config.tenant_namespace_cluster_role:
            return ""
        raise
    return str(((found or {}).get("data") or {}).get(REQUEST_KEY) or "")


def run_as(run: Pass, tenant: GpuTenant, request: str) -> tuple[GpuTenant, bool]:
    """Record the wake in the pass's status; the tenant as the pass runs it (awake while a wake
    holds) and whether a wake request is what keeps it awake."""
    run.status.wake = next_wake(tenant.spec.sleep, request, run.status.wake, run.status.usage, run.now)
    run.due(parse_rfc3339(run.status.wake.until) if run.status.wake and run.status.wake.until else None)
    if tenant.spec.sleep.asleep and woken(run.status.wake):
        return as_awake(tenant), True
    return tenant, False
