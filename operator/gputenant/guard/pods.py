"""Reading tenant pods: their containers of every kind and the GPU resources they ask for."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from gputenant.guard.keys import FRACTION_ANNOTATIONS
from gputenant.quantities import parse_quantity

GPU_RESOURCE_PREFIX = "nvidia.com/"
CONTAINER_KINDS = (("containers", "container"), ("initContainers", "init container"),
                   ("ephemeralContainers", "ephemeral container"))


def containers(pod: dict) -> Iterator[tuple[str, str, int, dict]]:
    """(spec key, human kind, index, container) for every container, init and ephemeral included."""
    spec = pod.get("spec") or {}
    for key, kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(key) or []):
            yield key, kind, index, container


def resource_names(container: dict) -> set[str]:
    """Every resource a container names in its requests or limits."""
    resources = container.get("resources") or {}
    return {name for section in ("limits", "requests") for name in (resources.get(section) or {})}


def container_gpu_amounts(container: dict) -> dict[str, Decimal]:
    """GPU extended resources of one container. Kubernetes makes requests equal limits for extended
    resources, and either alone counts, so the larger of the two is taken; a value that is not a
    quantity counts as 0 here (the apiserver refuses it before any webhook runs)."""
    resources = container.get("resources") or {}
    amounts: dict[str, Decimal] = {}
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if name.startswith(GPU_RESOURCE_PREFIX):
                amounts[name] = max(amounts.get(name, Decimal(0)), parse_quantity(value) or Decimal(0))
    return amounts


def pod_gpu_amounts(pod: dict) -> dict[str, Decimal]:
    """The pod's effective GPU request as the scheduler counts it: the sum over app containers and
    restartable (sidecar) init containers, or the largest single init container if that is more."""
    spec = pod.get("spec") or {}
    running: dict[str, Decimal] = {}
    for container in list(spec.get("containers") or []) + [
        c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]:
        for name, amount in container_gpu_amounts(container).items():
            running[name] = running.get(name, Decimal(0)) + amount
    effective = dict(running)
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            continue
        for name, amount in container_gpu_amounts(container).items():
            effective[name] = max(effective.get(name, Decimal(0)), amount)
    return effective


def asks_for_fraction(pod: dict) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return any(name in annotations for name in FRACTION_ANNOTATIONS)


def requests_gpus(pod: dict) -> bool:
    """Whether the pod asks for a GPU at all, by extended resource or by KAI fraction annotation."""
    return asks_for_fraction(pod) or any(container_gpu_amounts(c) for _, _, _, c in containers(pod))


def number(amount: Decimal) -> str:
    return str(amount.normalize()) if amount != amount.to_integral_value() else str(int(amount))


def pod_summary(pod: dict) -> dict[str, str]:
    """What the guard reports of a running GPU pod: its GPU resources (for MIG-change checks)."""
    return {name: number(amount) for name, amount in pod_gpu_amounts(pod).items()}
