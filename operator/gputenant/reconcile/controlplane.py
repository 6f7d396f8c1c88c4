"""Whether a tenant's vCluster control plane serves: its StatefulSet rolled out at the current
revision with every replica ready (a pure judgement over the StatefulSet and its pods), then its
API answering through the tenant's endpoint (asked by the vCluster step). The vCluster step, the
sleep step and the control-plane pod watch all read the control plane through this module.

The pinned chart (0.36.1) renders a StatefulSet for the operator's values (the embedded database
needs the data volume), its pods labelled ``app=vcluster`` and ``release=<release>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputenant.api import conditions as reasons

POD_LABELS = {"app": "vcluster"}
"""The labels the chart gives every control-plane pod (with ``release``)."""
REVISION_LABEL = "controller-revision-hash"
"""The StatefulSet controller's label: the revision a pod was made from."""


PodSignature = tuple[str | None] | None
"""What of a control-plane pod the tenant's readiness depends on (`pod_signature`)."""


@dataclass(frozen=True)
class ControlPlaneState:
    ready: bool
    reason: str
    """ControlPlaneUp when ready, else why not (a reason of api/conditions.py)."""
    message: str
    has_pods: bool = True
    lagging: bool = False
    """The StatefulSet's controller has yet to write what decides readiness (the generation it
    observed, its current revision) while the pods need nothing more: it writes within moments, and
    no pod event follows to call the tenant up (the operator does not watch StatefulSets)."""


def pod_labels(release: str) -> dict[str, str]:
    """The labels of one release's control-plane pods."""
    return {**POD_LABELS, "release": release}


def pod_selector(release: str) -> str:
    """The label selector of one release's control-plane pods."""
    return ",".join(f"{key}={value}" for key, value in pod_labels(release).items())


def seen_pods(pods: list[dict]) -> dict[str, PodSignature]:
    """Each control-plane pod's signature as a pass read it, by pod name."""
    return {pod["metadata"]["name"]: pod_signature("MODIFIED", pod) for pod in pods}


def control_plane_pods(pods: list[dict], release: str) -> list[dict]:
    """The release's control-plane pods among `pods` (what `pod_selector` selects)."""
    wanted = pod_labels(release).items()
    return [pod for pod in pods if wanted <= ((pod.get("metadata") or {}).get("labels") or {}).items()]


def pod_ready(pod: dict) -> bool:
    """Ready condition True and not being deleted."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def judge(statefulset: dict | None, pods: list[dict]) -> ControlPlaneState:
    """Ready only when the StatefulSet's controller has seen its latest spec, every replica runs the
    update revision (a rollout is complete) and that many pods of it are ready now."""
    if statefulset is None:
        return ControlPlaneState(False, reasons.CONTROL_PLANE_STARTING, "its StatefulSet is not created yet",
                                 has_pods=bool(pods))
    name = statefulset["metadata"]["name"]
    wanted = (statefulset.get("spec") or {}).get("replicas", 1)
    status = statefulset.get("status") or {}
    generation = statefulset["metadata"].get("generation")
    revision = status.get("updateRevision")
    live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    updated = [pod for pod in live if (pod["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
    ready = [pod for pod in updated if pod_ready(pod)]
    if status.get("observedGeneration") != generation or not revision:
        return ControlPlaneState(False, reasons.CONTROL_PLANE_ROLLING_OUT,
                                 f"StatefulSet {name} generation {generation} is not yet observed by its controller",
                                 has_pods=bool(pods), lagging=True)
    if wanted < 1:
        return ControlPlaneState(False, reasons.CONTROL_PLANE_STARTING, f"StatefulSet {name} is scaled to zero",
                                 has_pods=bool(pods))
    rolling = status.get("currentRevision") != revision or len(updated) < wanted or len(live) > wanted
    if len(ready) >= wanted and not rolling:
        return ControlPlaneState(True, reasons.CONTROL_PLANE_UP,
                                 f"StatefulSet {name} at revision {revision}: {len(ready)}/{wanted} pod(s) ready")
    counts = f"{len(updated)}/{wanted} pod(s) at revision {revision}, {len(ready)} ready"
    if rolling and status.get("currentRevision") != revision:
        pods_done = len(ready) >= wanted and len(updated) == len(live) == wanted
        return ControlPlaneState(False, reasons.CONTROL_PLANE_ROLLING_OUT,
                                 f"StatefulSet {name} is rolling out: {counts}", has_pods=bool(pods),
                                 lagging=pods_done)
    waiting = next((pod for pod in live if not pod_ready(pod)), None)
    detail = f"; pod {waiting['metadata']['name']}: {pod_detail(waiting)}" if waiting else ""
    return ControlPlaneState(False, reasons.CONTROL_PLANE_STARTING, f"StatefulSet {name}: {counts}{detail}",
                             has_pods=bool(pods))


def pod_detail(pod: dict) -> str:
    """What a pod that is not ready is doing, as `kubectl get pod` would summarise it."""
    status = pod.get("status") or {}
    containers = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    for container in containers:
        state = container.get("state") or {}
        if "waiting" in state:
            waiting = state["waiting"]
            return f"container {container['name']} waiting ({waiting.get('reason', 'unknown')})"
    unscheduled = next((c for c in status.get("conditions") or []
                        if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
    if unscheduled:
        return f"not scheduled: {unscheduled.get('message') or unscheduled.get('reason')}"
    running = next((c["name"] for c in containers if "running" in (c.get("state") or {}) and not c.get("ready")), None)
    if running:
        return f"container {running} running, readiness probe not passing yet"
    return f"phase {status.get('phase', 'Pending')}"


def pod_signature(event_type: str | None, pod: dict) -> PodSignature:
    """What of a control-plane pod the tenant's readiness depends on: the revision it serves at
    while it is ready; None while it does not serve (not ready yet, being deleted, gone). A pod's
    steps on the way to ready (created, scheduled, Running) change nothing the vCluster step would
    decide, so they call nobody up: the step's look again reports them in the status message."""
    if event_type == "DELETED" or not pod_ready(pod):
        return None
    return ((pod.get("metadata", {}).get("labels") or {}).get(REVISION_LABEL),)
