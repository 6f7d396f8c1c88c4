"""The tenant's view of itself, shown read-only inside its virtual cluster (docs/tenant-guide.md):
what it may ask for and how, its quota and limit, what its queue holds now and why a pod waits,
usage, sleep and IsolationVerified. Pure: the caller hands in the tenant, the policy's decision, the
status being written and the host pods of the tenant's namespace.

The view holds no time that moves by itself (no "updated at", no countdown in seconds: the moment
the tenant falls asleep instead), so the operator writes it only when something in it changed.
Nothing in it names another tenant: it is built from this tenant's spec, decision, status and pods;
KAI's own message about a pod is the one exception it quotes, and it is about that pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import yaml

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenant
from gputenant.policy.decision import Decision
from gputenant.quantities import parse_quantity
from gputenant.timefmt import parse_duration, parse_rfc3339, rfc3339

VIEW_CONFIGMAP = "gputenant-view"
"""The ConfigMap in the tenant's host namespace the operator writes the view to."""
VIRTUAL_NAMESPACE = "kube-public"
VIRTUAL_NAME = "gputenant"
"""Where vCluster's sync from host shows it inside the virtual cluster (kube-public always exists)."""
VIEW_KEY = "view.json"
EXAMPLE_KEY = "example-pod.yaml"
COMPONENT = "tenant-view"
FRACTION_ANNOTATION = "gpu-fraction"
VIRTUAL_NAME_ANNOTATION = "vcluster.loft.sh/object-name"
VIRTUAL_NAMESPACE_ANNOTATION = "vcluster.loft.sh/object-namespace"
"""vCluster's annotations on a synced host pod: the virtual pod's name and namespace."""
RESTRICTED_CONTAINER = {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
"""What Pod Security ``restricted`` (Untrusted tenants) admits; the other levels admit it too."""
MAX_LISTED_PODS = 50
NOT_STARTED = "NotStarted"
"""A placed GPU pod that cannot start: the guard's init container could not deliver HAMi-core to it."""


@dataclass(frozen=True)
class QueuedPod:
    """One GPU pod of the tenant as its queue sees it, by its name inside the virtual cluster."""

    namespace: str
    name: str
    units: float
    """What it counts in the queue, in KAI's units (GPUs; a MIG instance its slices)."""
    bound: bool
    scheduler_message: str = ""
    """Why the scheduler has not placed it (its PodScheduled condition), "" when bound or not said."""
    not_started: str = ""
    """Why a bound pod cannot start although placed (HAMi-core not delivered to it), "" otherwise."""


def _fraction(pod: dict) -> Fraction | None:
    written = ((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION_ANNOTATION)
    try:
        return Fraction(Decimal(str(written).strip())) if written is not None else None
    except (InvalidOperation, ValueError):
        return None


def pod_signature_for_view(pod: dict) -> tuple | None:
    """What of a host pod the view shows, to tell whether its change changes the view: None for a
    pod the view never lists (not synced from a virtual cluster, or asking for no GPU by fraction or
    by an ``nvidia.com/`` resource), else whether it is bound, its phase, its scheduling verdict and
    whether it is going."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if VIRTUAL_NAME_ANNOTATION not in (metadata.get("annotations") or {}):
        return None
    limits = [key for container in spec.get("containers") or []
              for key in ((container.get("resources") or {}).get("limits") or {})]
    if _fraction(pod) is None and not any(key.startswith("nvidia.com/") for key in limits):
        return None
    scheduled: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return (bool(spec.get("nodeName")), status.get("phase"), scheduled.get("status"), scheduled.get("message"),
            bool(metadata.get("deletionTimestamp")))


def status_signature_for_view(status: dict) -> tuple:
    """What of a tenant's status the view shows that only the usage and attestation loops write."""
    isolation = _condition(status, reasons.ISOLATION_VERIFIED)
    return (json.dumps(status.get("usage") or {}, sort_keys=True),
            tuple(isolation.get(key) for key in ("status", "reason", "message")))


def units_per_device(decision: Decision) -> dict[str, float]:
    """Queue units one device of each GPU resource counts: the queue's limit over the quota's
    ``requests.<resource>`` (1 for whole GPUs and replicas, the slice count for a MIG instance)."""
    if decision.queue is None or decision.pod_rules is None:
        return {}
    units = {}
    for resource in decision.pod_rules.gpu_resources:
        devices = float(parse_quantity(decision.quota.get(f"requests.{resource}", "0")) or 0)
        units[resource] = decision.queue.limit / devices if devices else 1.0
    return units


def pod_units(pod: dict, per_device: dict[str, float]) -> float:
    """The pod's charge against the queue: its ``gpu-fraction``, else its GPU resources' limits."""
    fraction = _fraction(pod)
    if fraction is not None:
        return float(fraction)
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = ((container.get("resources") or {}).get("limits")) or {}
        total += sum(float(parse_quantity(str(limits[r])) or 0) * per for r, per in per_device.items() if r in limits)
    return total


def queued_pods(host_pods: list[dict], decision: Decision,
                not_started: dict[str, str] | None = None) -> list[QueuedPod]:
    """The tenant's unfinished GPU pods synced from its virtual cluster, by their virtual names;
    `not_started`: host pod name -> why that pod cannot start (listed even once it has failed)."""
    per_device = units_per_device(decision)
    not_started = not_started or {}
    queued = []
    for pod in host_pods:
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        annotations = metadata.get("annotations") or {}
        blocked = not_started.get(metadata.get("name") or "", "")
        if VIRTUAL_NAME_ANNOTATION not in annotations or metadata.get("deletionTimestamp") \
                or (status.get("phase") in ("Succeeded", "Failed") and not blocked):
            continue
        units = pod_units(pod, per_device)
        if units <= 0:
            continue
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        scheduled: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        message = "" if bound or scheduled.get("status") != "False" else str(scheduled.get("message") or "")
        queued.append(QueuedPod(annotations.get(VIRTUAL_NAMESPACE_ANNOTATION, ""), annotations[VIRTUAL_NAME_ANNOTATION],
                                units, bound, message, blocked))
    return sorted(queued, key=lambda p: (p.namespace, p.name))


def pending_reason(pod: QueuedPod, allocated: float, decision: Decision) -> str:
    """Why a pod waits, in the tenant's words: its queue's limit when the pod does not fit under it,
    else what the scheduler said, else that the scheduler has not looked yet."""
    queue = decision.queue
    if queue is not None and allocated + pod.units > queue.limit + 1e-9:
        return (f"queue {queue.name} at its limit of {queue.limit:g} GPUs ({allocated:g} allocated, "
                f"this pod asks for {pod.units:g}); it starts when {allocated + pod.units - queue.limit:g} GPUs "
                "of the queue are released")
    if pod.scheduler_message:
        pool = f" on pool {decision.pool.name}" if decision.pool else ""
        return f"the scheduler found no place{pool}: {pod.scheduler_message}"
    return "waiting for the scheduler"


def how_to_ask(decision: Decision, caps: list[dict]) -> dict:
    """What a pod must ask for in this tenant's mechanism, with one ready example."""
    rules = decision.pod_rules
    if not decision.possible or rules is None:
        return {"possible": False, "why": decision.message}
    if rules.fraction_share is None and not rules.gpu_resources:
        # a tenant granted no GPU (spec.gpu.quota 0) has nothing to ask for
        return {"possible": False, "why": decision.message}
    asked: dict = {"possible": True}
    if rules.fraction_share is not None:
        share, largest = rules.fraction_share, rules.max_fraction or rules.fraction_share
        sizes = [f"{float(share * k):g}" for k in range(1, int(largest / share) + 1)]
        asked.update(annotation=FRACTION_ANNOTATION, sizes=sizes,
                     how=f"annotate the pod {FRACTION_ANNOTATION}: one of {', '.join(sizes)} (a share of one GPU); "
                         "no GPU resource")
        if caps:
            asked["hamiCaps"] = caps
        example = example_pod({"annotations": {FRACTION_ANNOTATION: sizes[0]}}, {})
    else:
        resource = rules.gpu_resources[0]
        most = rules.max_per_pod.get(resource)
        asked.update(resource=resource, maxPerPod=most, maxPerContainer=rules.max_per_container.get(resource),
                     how=f"resources.limits {resource}: a whole number from 1 to {most} per pod")
        if rules.allow_fraction_annotations:
            asked["fractionAnnotation"] = FRACTION_ANNOTATION
        example = example_pod({}, {resource: "1"})
    asked["examplePod"] = example
    return asked


def example_pod(metadata: dict, limits: dict[str, str]) -> dict:
    """A pod the tenant can apply as it is (every trust level's Pod Security admits it)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-example", **metadata},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["nvidia-smi"],
                "securityContext": RESTRICTED_CONTAINER,
                "resources": {"limits": {**limits, "cpu": "1", "memory": "1Gi"}}}]}}


def _condition(status: dict, condition_type: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c.get("type") == condition_type), {})


def sleep_view(tenant: GpuTenant, status: dict) -> dict:
    """Asleep or not, and when the idle policy would put it to sleep (a moment, not a countdown)."""
    asleep = _condition(status, reasons.ASLEEP)
    view: dict = {"asleep": asleep.get("reason") not in (None, reasons.AWAKE),
                  "state": asleep.get("reason") or reasons.AWAKE}
    wake = status.get("wake") or {}
    if wake.get("until"):
        view["wokenUntil"] = wake["until"]
    idle = tenant.spec.sleep.idle
    if idle is None:
        view["idlePolicy"] = None
        return view
    view["idlePolicy"] = {"after": idle.after}
    since = parse_rfc3339(((status.get("usage") or {}).get("allIdleSince")) or "")
    after = parse_duration(idle.after) or timedelta(0)
    if since is not None and not view["asleep"]:
        view["idlePolicy"].update(allIdleSince=rfc3339(since), sleepsAt=rfc3339(since + after))
    return view


USAGE_KEYS = ("window", "gpusHeld", "gpuHoursHeld", "gpuHoursUsed", "idleGpuCount", "busyNotWorking", "allIdleSince")


def _state(pod: QueuedPod, allocated: float, decision: Decision) -> dict:
    if pod.not_started:
        return {"state": NOT_STARTED, "reason": (
            "its GPU isolation library (HAMi-core) could not be delivered, so the pod does not start: "
            f"{pod.not_started}; the platform team sees the same on its pool report")}
    if pod.bound:
        return {"state": "Running"}
    return {"state": "Pending", "reason": pending_reason(pod, allocated, decision),
            **({"scheduler": pod.scheduler_message} if pod.scheduler_message else {})}


def tenant_view(tenant: GpuTenant, decision: Decision, status: dict, pods: list[QueuedPod],
                caps: list[dict] | None = None) -> dict:
    """The view's content; `status` is the status body the pass writes, `caps` HAMi-core's caps per
    pod size (HAMi mode only)."""
    queue = decision.queue
    allocated = sum(p.units for p in pods if p.bound)
    listed = [{"namespace": p.namespace, "name": p.name, "gpus": p.units, **_state(p, allocated, decision)}
              for p in pods[:MAX_LISTED_PODS]]
    isolation = _condition(status, reasons.ISOLATION_VERIFIED)
    usage = status.get("usage") or {}
    return {
        "tenant": tenant.name,
        "trust": decision.trust.value,
        "mechanism": decision.mode.value if decision.mode else None,
        "pool": decision.pool.name if decision.pool else None,
        "ask": how_to_ask(decision, caps or []),
        "quota": {"resourceQuota": dict(decision.quota),
                  "queue": {"name": queue.name, "quota": queue.quota, "limit": queue.limit, "unit": "GPUs"}
                  if queue else None},
        "queue": {"allocated": allocated, "pending": sum(1 for p in pods if not p.bound), "pods": listed,
                  "more": max(0, len(pods) - MAX_LISTED_PODS)},
        "usage": {key: usage[key] for key in USAGE_KEYS if key in usage} or None,
        "sleep": sleep_view(tenant, status),
        "isolationVerified": {key: isolation[key] for key in ("status", "reason", "message") if key in isolation}
        or None,
    }


def view_configmap(tenant: str, namespace: str, view: dict) -> dict:
    """The host ConfigMap vCluster shows inside the virtual cluster as kube-public/gputenant."""
    example = view["ask"].get("examplePod")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": VIEW_CONFIGMAP, "namespace": namespace,
                         "labels": naming.tenant_labels(tenant, COMPONENT)},
            "data": {VIEW_KEY: json.dumps(view, indent=1, sort_keys=True),
                     **({EXAMPLE_KEY: yaml.safe_dump(example, sort_keys=False)} if example else {})}}


def pods_of(view: dict) -> dict[tuple[str, str], str]:
    """(namespace, name) -> why, of each pod a view lists as pending or unable to start."""
    return {(p["namespace"], p["name"]): p.get("reason", "") for p in (view.get("queue") or {}).get("pods") or []
            if p.get("state") in ("Pending", NOT_STARTED)}
