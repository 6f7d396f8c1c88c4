"""What the guard fills in on a tenant pod: queue, scheduler, placement, KAI's ConfigMap prefix, a blind
GPU view, no ``NET_RAW`` (``capabilities``).

Placement is the guard's alone: a GPU pod goes to its tenant's pool, every other pod (the vCluster
control plane, CoreDNS, CPU-only work) to the configured CPU pool. vCluster cannot tell them apart:
its one node selector (``sync.fromHost.nodes.selector.labels``) is forced onto every synced pod.

Values the tenant set are never overwritten: a foreign queue or scheduler is left in place so that
validation refuses it with a message instead of silently rewriting it. The one exception is KAI's
ConfigMap prefix of a fraction pod (``kai_sharing.guard_prefix``): the guard's value replaces the tenant's,
before KAI's webhook (called after ``gputenant-guard`` in name order) keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputenant import naming
from gputenant.config.pools import CpuPool
from gputenant.guard import hami_caps
from gputenant.guard.capabilities import drop_patch
from gputenant.guard.gangs import POD_GROUP_ANNOTATION, GangError, asks_for_gang, gang_name, gang_size
from gputenant.guard.kai_sharing import CONFIGMAP_ANNOTATION, FRACTION_CONTAINER, guard_prefix
from gputenant.guard.pods import asks_for_fraction, container_gpu_amounts, requests_gpus
from gputenant.policy.decision import Decision

DEFAULT_SCHEDULER = "default-scheduler"
"""What the apiserver defaults an unset schedulerName to, before any webhook sees the pod."""
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_DEVICES = "void"
"""NVIDIA's container runtime shows a container the GPUs this variable names; CUDA images set it to
``all``. A container that asked for no GPU gets ``void`` (as KAI's deviceaccess plugin does), so
landing on a GPU node shows it none."""


def tenant_queue(tenant_name: str, decision: Decision) -> str:
    return decision.queue.name if decision.queue else naming.queue_name(tenant_name)


def pointer(segment: str) -> str:
    """Escape one JSON-pointer segment (RFC 6901): label keys and resource names contain '/'."""
    return segment.replace("~", "~0").replace("/", "~1")


def on_pool_scheduler(pod: dict, decision: Decision) -> bool:
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    return decision.pool is not None and scheduler == decision.pool.scheduler_name


def is_pool_pod(pod: dict, decision: Decision) -> bool:
    """Whether the pod belongs on the tenant's GPU pool: it asks for GPUs and the policy gave one."""
    return decision.possible and decision.pool is not None and requests_gpus(pod)


def placement(pod: dict, decision: Decision, cpu_pool: CpuPool) -> tuple[dict[str, str], list[dict]]:
    """(nodeSelector, tolerations) the pod must run under: its pool's for a GPU pod, the CPU pool's
    for any other. The guard adds them; its rules refuse any other value of a pool's keys."""
    nodes = decision.pool if is_pool_pod(pod, decision) and decision.pool else cpu_pool
    return dict(nodes.node_selector), [t.model_dump(exclude_none=True, by_alias=True) for t in nodes.tolerations]


def allows_fractions(decision: Decision) -> bool:
    """Whether the tenant's pods may ask KAI for a GPU fraction."""
    rules = decision.pod_rules if decision.possible else None
    return rules is not None and (rules.fraction_share is not None or rules.allow_fraction_annotations)


def mutate_pod(pod: dict, tenant_name: str, decision: Decision, *, operation: str = "CREATE",
               subresource: str | None = None, old: dict | None = None,
               cpu_pool: CpuPool | None = None) -> list[dict]:
    """JSON-patch operations for a tenant pod.

    GPU pods are put on the tenant's queue, scheduler and pool; any pod the pool's scheduler places
    gets the queue label (KAI charges a pod without it to a default queue). Pods without GPUs (the
    vCluster control plane, CoreDNS) go to the CPU pool and get a blind GPU view, and so does
    every ephemeral container added later (it has no GPU resources). A fraction pod gets the guard's
    KAI ConfigMap prefix, every container drops ``NET_RAW`` (and so does every ephemeral container added
    later), and in HAMi mode HAMi-core's caps (``hami_caps``, added last: it inserts an init
    container ahead of the tenant's). On UPDATE only labels may change, so only the queue label is filled.
    """
    if subresource == "ephemeralcontainers":
        return [*_blind_new_ephemeral_containers(pod, old), *drop_patch(pod, old)]
    gpu_pod = is_pool_pod(pod, decision)
    patch: list[dict] = []
    if gpu_pod or on_pool_scheduler(pod, decision):
        patch.extend(_queue_label(pod, tenant_queue(tenant_name, decision)))
    if operation != "CREATE":
        return patch
    if gpu_pod:
        patch.extend(_scheduler(pod, decision))
        patch.extend(_gang(pod, tenant_name))
    patch.extend(_placement(pod, *placement(pod, decision, cpu_pool or CpuPool())))
    if asks_for_fraction(pod) and allows_fractions(decision):
        patch.extend(_kai_prefix(pod))
    patch.extend(_blind_gpu_view(pod, fraction=asks_for_fraction(pod)))
    patch.extend(drop_patch(pod))
    patch.extend(hami_caps.mutation(pod, decision))
    return patch


def _queue_label(pod: dict, queue: str) -> Iterator[dict]:
    labels = (pod.get("metadata") or {}).get("labels")
    if labels is None:
        yield {"op": "add", "path": "/metadata/labels", "value": {naming.QUEUE_LABEL: queue}}
    elif naming.QUEUE_LABEL not in labels:
        yield {"op": "add", "path": f"/metadata/labels/{pointer(naming.QUEUE_LABEL)}", "value": queue}


def _scheduler(pod: dict, decision: Decision) -> Iterator[dict]:
    pool = decision.pool
    assert pool is not None
    if (pod.get("spec") or {}).get("schedulerName") in (None, DEFAULT_SCHEDULER):
        yield {"op": "add", "path": "/spec/schedulerName", "value": pool.scheduler_name}


def _gang(pod: dict, tenant_name: str) -> Iterator[dict]:
    """Name the pod's gang PodGroup; a tenant's own pod-group-name, or a gang request that cannot be
    honoured, is left for validation to refuse."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not asks_for_gang(pod) or POD_GROUP_ANNOTATION in annotations:
        return
    try:
        gang_size(pod)
        name = gang_name(pod, tenant_name)
    except GangError:
        return
    yield {"op": "add", "path": f"/metadata/annotations/{pointer(POD_GROUP_ANNOTATION)}", "value": name}


def _kai_prefix(pod: dict) -> Iterator[dict]:
    """Set, or replace the tenant's, KAI ConfigMap prefix with the guard's; the same on every
    reinvocation. A pod without a name gets none, and validation refuses it."""
    prefix = guard_prefix(pod)
    annotations = (pod.get("metadata") or {}).get("annotations")
    if prefix is None or (annotations or {}).get(CONFIGMAP_ANNOTATION) == prefix:
        return
    if annotations is None:
        yield {"op": "add", "path": "/metadata/annotations", "value": {CONFIGMAP_ANNOTATION: prefix}}
    else:
        yield {"op": "add", "path": f"/metadata/annotations/{pointer(CONFIGMAP_ANNOTATION)}", "value": prefix}


def _placement(pod: dict, selector: dict[str, str], wanted: list[dict]) -> Iterator[dict]:
    spec = pod.get("spec") or {}
    node_selector = spec.get("nodeSelector")
    if selector:
        if node_selector is None:
            yield {"op": "add", "path": "/spec/nodeSelector", "value": selector}
        else:
            for key, value in selector.items():
                if key not in node_selector:
                    yield {"op": "add", "path": f"/spec/nodeSelector/{pointer(key)}", "value": value}

    tolerations = spec.get("tolerations")
    missing = [t for t in wanted if t not in (tolerations or [])]
    if missing:
        if tolerations is None:
            yield {"op": "add", "path": "/spec/tolerations", "value": missing}
        else:
            yield from ({"op": "add", "path": "/spec/tolerations/-", "value": t} for t in missing)


def _blind_gpu_view(pod: dict, *, fraction: bool) -> Iterator[dict]:
    """Every container without GPU resources sees no GPU; in a KAI fraction pod, all but the one
    KAI gives the share (its sidecars and init containers would otherwise see the node's GPUs)."""
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(key) or []):
            if fraction and key == "containers" and index == FRACTION_CONTAINER:
                continue
            if not container_gpu_amounts(container):
                yield from _blind(key, index, container)


def _blind_new_ephemeral_containers(pod: dict, old: dict | None) -> Iterator[dict]:
    """Existing ephemeral containers cannot change; only those this request adds are blinded."""
    existing = {c.get("name") for c in ((old or {}).get("spec") or {}).get("ephemeralContainers") or []}
    for index, container in enumerate((pod.get("spec") or {}).get("ephemeralContainers") or []):
        if container.get("name") not in existing:
            yield from _blind("ephemeralContainers", index, container)


def _blind(key: str, index: int, container: dict) -> Iterator[dict]:
    env = container.get("env")
    variable = {"name": VISIBLE_DEVICES, "value": NO_DEVICES}
    if env is None:
        yield {"op": "add", "path": f"/spec/{key}/{index}/env", "value": [variable]}
    elif not any(v.get("name") == VISIBLE_DEVICES for v in env):
        yield {"op": "add", "path": f"/spec/{key}/{index}/env/-", "value": variable}
