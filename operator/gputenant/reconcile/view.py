"""Writes the tenant's view (render/tenant_view.py) at the end of each pass: the ConfigMap
``gputenant-view`` in the host namespace, which vCluster's sync from host shows read-only inside the
virtual cluster as ``kube-public/gputenant``; and, for each GPU pod that newly waits or waits for a
new reason (a share whose HAMi-core library could not be delivered among them: vCluster shows the
tenant no status of the guard's init container), an Event on its host pod in the tenant's words,
which vCluster syncs to the virtual pod.

API load: one LIST of the host namespace's pods per pass that finds the control plane serving (none
while asleep, none while it starts); the ConfigMap is read
from the pass's snapshot of the tenant's labelled ConfigMaps (the LIST the wake request reuses) and
written only when its content changed. Best effort: a failure is logged, never fails the pass.
"""

from __future__ import annotations

import json
import logging

from gputenant.api import conditions as reasons
from gputenant.guard.hami_caps import caps_by_size
from gputenant.kube import ApiError, Applier
from gputenant.pools.hami_library import library_failure
from gputenant.reconcile.context import Pass
from gputenant.reconcile.events import post_pod_event
from gputenant.reconcile.ownership import adopt
from gputenant.render.tenant_view import (
    VIEW_CONFIGMAP,
    VIEW_KEY,
    VIRTUAL_NAME_ANNOTATION,
    VIRTUAL_NAMESPACE_ANNOTATION,
    pods_of,
    queued_pods,
    tenant_view,
    view_configmap,
)
from gputenant.tenant_status import conditions as cond

log = logging.getLogger(__name__)


def ready_for_view(run: Pass) -> bool:
    """Only once the policy decided and the host namespace is there, and while the control plane
    serves or the tenant sleeps: the view reaches the tenant through the vCluster's syncer, so a
    view written while an awake control plane starts (or restarts) would be seen by nobody, and an
    onboarding would write it twice."""
    namespace = cond.find(run.conditions, reasons.NAMESPACE_READY)
    if not (run.planned and run.plan.decision.possible and namespace
            and namespace.status == cond.ConditionStatus.TRUE):
        return False
    control_plane = cond.find(run.conditions, reasons.VCLUSTER_READY)
    serving = control_plane is not None and control_plane.status == cond.ConditionStatus.TRUE
    return serving or run.plan.tenant.spec.sleep.asleep


async def publish_view(run: Pass, status: dict) -> None:
    if not ready_for_view(run):
        return
    try:
        await write_view(run, status)
    except ApiError as error:
        log.warning("tenant %s: its view was not written: %s", run.name, error)


async def write_view(run: Pass, status: dict) -> None:
    asleep = run.plan.tenant.spec.sleep.asleep
    host_pods = [] if asleep else await run.host_pods()
    caps = [{"gpuFraction": f"{float(c.fraction):g}", "memoryMiB": c.memory_mib, "smPercent": c.sm_percent}
            for c in caps_by_size(run.plan.decision)]
    not_started = {pod["metadata"]["name"]: why for pod in host_pods if (why := library_failure(pod))}
    view = tenant_view(run.plan.tenant, run.plan.decision, status, queued_pods(host_pods, run.plan.decision, not_started), caps)
    live = await run.snapshot.lookup("v1", "ConfigMap", VIEW_CONFIGMAP, run.host_namespace)
    before = pods_of(json.loads(((live or {}).get("data") or {}).get(VIEW_KEY) or "{}"))
    await Applier(run.client, run.snapshot).ensure(adopt(view_configmap(run.name, run.host_namespace, view),
                                                         run.body, run.host_namespace))
    for pod in host_pods:
        annotations = pod["metadata"].get("annotations") or {}
        key = (annotations.get(VIRTUAL_NAMESPACE_ANNOTATION, ""), annotations.get(VIRTUAL_NAME_ANNOTATION, ""))
        reason = pods_of(view).get(key)
        if reason and before.get(key) != reason:
            await post_pod_event(run.client, pod, reasons.GPU_POD_PENDING, reason, run.now)
