"""GPUs held by KAI reservations that no live tenant share explains: a leak detector for the pool report.

For GPU fractions KAI's binder reserves a whole GPU with a reservation pod in its reservation
namespace, labelled with the GPU's group (``runai-gpu-group``), and labels every share it binds onto
that GPU with the same group (``runai-gpu-group``, or ``runai-gpu-group/<group>`` for multi-GPU
shares). It deletes the reservation once no pod carries the group (KAI v0.12.0
``pkg/binder/binding/resourcereservation``) — whatever the pod is: a pending pod given the label
kept a whole GPU reserved, charged to no queue, and survived its victim's sleep. The guard now
refuses those labels from tenants; this check finds the whole class from the other side: a
reservation is explained only by a live share of some tenant (a pod of a tenant namespace that is
not finished, asks for a KAI fraction, is bound to the reservation's node and carries its group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gputenant.guard.kai_vocabulary import GPU_GROUP_LABEL as GPU_GROUP
from gputenant.guard.kai_vocabulary import MULTI_GPU_GROUP_PREFIX
from gputenant.guard.pods import asks_for_fraction
from gputenant.pools.report import PoolReport
from gputenant.quantities import parse_quantity
from gputenant.timefmt import parse_rfc3339

GPU = "nvidia.com/gpu"
FINISHED = ("Succeeded", "Failed")
SETTLING = timedelta(minutes=2)
"""A new reservation is not judged yet: KAI's binder creates it, waits up to 40 s for its GPU's index,
and only then labels and binds the share it was made for."""


@dataclass(frozen=True)
class HeldReservation:
    """A reservation pod no live share explains, and the GPUs it holds."""

    node: str
    pod: str
    group: str
    gpus: float


def _gpu_groups(pod: dict) -> set[str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    groups = {value for key, value in labels.items() if key.startswith(MULTI_GPU_GROUP_PREFIX)}
    return groups | ({labels[GPU_GROUP]} if GPU_GROUP in labels else set())


def _reserved_gpus(pod: dict) -> float:
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU, (resources.get("requests") or {}).get(GPU))
        total += float(parse_quantity(amount) or 0)
    return total


def _live_share(pod: dict, tenant_namespaces: set[str]) -> bool:
    return ((pod.get("metadata") or {}).get("namespace") in tenant_namespaces
            and (pod.get("status") or {}).get("phase") not in FINISHED
            and bool((pod.get("spec") or {}).get("nodeName")) and asks_for_fraction(pod))


def unexplained_reservations(reservations: Iterable[dict], pods: Iterable[dict], tenant_namespaces: Iterable[str],
                             now: datetime) -> list[HeldReservation]:
    """The bound reservation pods (KAI's reservation namespace) older than SETTLING whose (node, GPU group)
    no live share of any tenant explains. `pods` may hold any pods; only tenant namespaces' shares count."""
    namespaces = set(tenant_namespaces)
    explained = {((p.get("spec") or {}).get("nodeName"), group) for p in pods if _live_share(p, namespaces)
                 for group in _gpu_groups(p)}
    held = []
    for pod in reservations:
        node = (pod.get("spec") or {}).get("nodeName")
        created = parse_rfc3339(pod["metadata"].get("creationTimestamp"))
        if not node or (pod.get("status") or {}).get("phase") in FINISHED or created is None or now - created < SETTLING:
            continue
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(GPU_GROUP, "")
        if (node, group) not in explained:
            held.append(HeldReservation(node=node, pod=pod["metadata"]["name"], group=group, gpus=_reserved_gpus(pod)))
    return sorted(held, key=lambda h: (h.node, h.pod))


def leak_problem(held: list[HeldReservation], namespace: str) -> str | None:
    """The pool report's problem for the reservations held on one pool's nodes; None when there are none."""
    if not held:
        return None
    gpus = sum(h.gpus for h in held)
    names = ", ".join(f"{h.pod} on {h.node} (group {h.group or '-'})" for h in held)
    return (f"UnexplainedReservation: {gpus:g} GPU(s) held by KAI reservation pods that no live tenant share "
            f"explains: {names}; find the pods labelled with the group (kubectl get pods -A -l "
            f"'{GPU_GROUP}=<group>'), or delete the reservation pod in {namespace} once none is live")


def add_leak_problems(reports: list[PoolReport], held: list[HeldReservation], namespace: str) -> None:
    """Name, in each pool's report, the reservations held on its nodes that no share explains."""
    for report in reports:
        problem = leak_problem([h for h in held if h.node in report.nodes], namespace)
        if problem:
            report.problems.append(problem)
