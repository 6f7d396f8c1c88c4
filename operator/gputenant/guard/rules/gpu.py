"""Rules on the GPUs a pod asks for: only the tenant's mechanism, in its units, within its limits."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from gputenant.guard import keys
from gputenant.guard.pods import container_gpu_amounts, containers, number, pod_gpu_amounts, resource_names
from gputenant.guard.registry import Review, rule
from gputenant.guard.rules.common import decimal
from gputenant.sharing import registry
from gputenant.sharing.base import Mechanism

GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION = keys.FRACTION_ANNOTATIONS
"""KAI's requests for a share of one GPU: a portion (0 < x < 1) or MiB of its memory."""
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
DEVICE_CLASS_RESOURCE = ".deviceclass.resource.k8s.io/devices"


@rule("gpu-not-granted", "a GPU pod of a tenant whose policy cannot be applied (the decision's message is quoted)")
def _gpu_not_granted(review: Review) -> Iterator[str]:
    if review.gpu_pod and review.rules is None:
        reason = review.decision.message if not review.decision.possible else "the tenant has no GPU policy"
        yield f"the pod asks for GPUs but the tenant's GPU policy cannot be applied: {reason}"


def _foreign_gpu_resources(review: Review) -> list[str]:
    rules = review.rules
    if rules is None:
        return []
    seen: list[str] = []
    for _, _, _, container in containers(review.pod):
        for name in container_gpu_amounts(container):
            if name not in rules.gpu_resources and name not in seen:
                seen.append(name)
    return seen


def _granted(review: Review) -> str:
    rules = review.rules
    if rules and rules.fraction_share is not None:
        return (f"no GPU resource but annotation {GPU_FRACTION_ANNOTATION}: \"{decimal(rules.fraction_share)}\" "
                "(KAI GPU fractions)")
    return ", ".join(rules.gpu_resources) if rules and rules.gpu_resources else "no GPU resources"


def _mechanism(review: Review) -> Mechanism | None:
    return registry.mechanism(review.decision.mode) if review.decision.mode else None


def _profile_prefix(review: Review) -> str | None:
    """The prefix of the tenant's mechanism's profile resources (MIG's), None when it has none."""
    mechanism = _mechanism(review)
    return mechanism.profile_resource_prefix if mechanism else None


@rule("mig-profile", "a MIG profile the tenant was not granted")
def _mig_profile(review: Review) -> Iterator[str]:
    prefix = _profile_prefix(review)
    if prefix is None:
        return
    for name in _foreign_gpu_resources(review):
        if name.startswith(prefix):
            yield (f"{review.mode} profile {name.removeprefix(prefix)} is not granted to the tenant; "
                   f"request {_granted(review)}")


@rule("gpu-resource", "an `nvidia.com/*` resource of another mechanism than the tenant's (e.g. `nvidia.com/gpu` "
      "for a MIG tenant, `nvidia.com/gpumem-percentage`, which the quota cannot count)")
def _gpu_resource(review: Review) -> Iterator[str]:
    prefix = _profile_prefix(review)
    for name in _foreign_gpu_resources(review):
        if prefix is not None and name.startswith(prefix):
            continue
        yield f"{name} belongs to another sharing mechanism than {review.mode}; request {_granted(review)}"


@rule("per-container-limit", "more than the policy allows per container (1 time-sliced replica when the pool "
      "fails larger requests)")
def _per_container(review: Review) -> Iterator[str]:
    rules = review.rules
    if rules is None:
        return
    mechanism = _mechanism(review)
    why = mechanism.per_container_why if mechanism else ""
    for _, kind, _, container in containers(review.pod):
        for name, amount in container_gpu_amounts(container).items():
            limit = rules.max_per_container.get(name)
            if name in rules.gpu_resources and limit is not None and amount > limit:
                yield (f"{kind} {container.get('name')} requests {number(amount)} {name}; at most {limit} "
                       f"per container{why}")


@rule("per-pod-limit", "a pod's effective request (containers + sidecars, or the largest init container) above "
      "the tenant's limit")
def _per_pod(review: Review) -> Iterator[str]:
    rules = review.rules
    if rules is None:
        return
    for name, amount in pod_gpu_amounts(review.pod).items():
        limit = rules.max_per_pod.get(name)
        if name in rules.gpu_resources and limit is not None and amount > limit:
            yield f"the pod requests {number(amount)} {name}; the tenant's limit is {limit} per pod"


@rule("fraction-annotation", "KAI `gpu-fraction` / `gpu-memory` annotations unless the mode allows them "
      "(TimeSlicing; HAMi only `gpu-fraction` in whole shares of the tenant's `corePercent`, below one GPU "
      "and within its limit); on UPDATE any change of them")
def _fraction(review: Review) -> Iterator[str]:
    if review.operation != "CREATE" and review.old is not None:
        before = ((review.old.get("metadata") or {}).get("annotations") or {})
        for name in keys.FRACTION_ANNOTATIONS:
            if review.annotations.get(name) != before.get(name):
                yield (f"annotation {name} changed on a created pod; KAI placed and charged the pod for its share "
                       f"when it was created (create a new pod instead)")
    rules = review.rules
    if rules is not None and rules.fraction_share is not None:
        yield from _shares(review, rules.fraction_share, rules.max_fraction or Fraction(0))
        return
    if rules is not None and rules.allow_fraction_annotations:
        return
    for name in keys.FRACTION_ANNOTATIONS:
        if name in review.annotations:
            yield (f"annotation {name} asks KAI for a shared GPU, which sharing {review.mode} does not allow "
                   "(remove it)")


def _shares(review: Review, share: Fraction, largest: Fraction) -> Iterator[str]:
    """HAMi mode: a GPU pod is one `gpu-fraction` of k shares. `gpu-memory` is refused: KAI turns it into
    a fraction of whatever GPU the pod lands on, so the queue charge is not known at admission."""
    if GPU_MEMORY_ANNOTATION in review.annotations:
        yield (f"annotation {GPU_MEMORY_ANNOTATION} is not granted; ask for a share with annotation "
               f"{GPU_FRACTION_ANNOTATION}: \"{decimal(share)}\" (its memory is that portion of the GPU)")
    written = review.annotations.get(GPU_FRACTION_ANNOTATION)
    if written is None:
        return
    fix = (f"set {GPU_FRACTION_ANNOTATION} to a multiple of {decimal(share)} up to {decimal(largest)}"
           if largest >= share else "the tenant's limit holds no share")
    try:
        fraction = Fraction(Decimal(written.strip()))
    except (InvalidOperation, ValueError, OverflowError):
        yield f"annotation {GPU_FRACTION_ANNOTATION}={written!r} is not a number; {fix}"
        return
    if fraction <= 0 or fraction % share or fraction > largest:
        yield (f"annotation {GPU_FRACTION_ANNOTATION}={written} is not a whole number of the tenant's "
               f"{decimal(share)} GPU shares within its limit; {fix}")



@rule("resource-name", "a resource outside cpu, memory, ephemeral-storage, hugepages-*, the tenant's GPU "
      "resources and the DeviceClasses in `guard.deviceClasses`")
def _resource_names(review: Review) -> Iterator[str]:
    granted_classes = {f"{c}{DEVICE_CLASS_RESOURCE}" for c in review.settings.device_classes}
    for _, kind, _, container in containers(review.pod):
        for name in sorted(resource_names(container)):
            if (name in BASE_RESOURCES or name.startswith("hugepages-") or name.startswith("nvidia.com/")
                    or name in granted_classes):
                continue
            yield (f"{kind} {container.get('name')} requests {name}, which is not granted to tenants "
                   "(remove it, or ask the platform team to add its DeviceClass to guard.deviceClasses)")


@rule("resource-claim", "DRA `resourceClaims` in the pod or its containers (the guard cannot see a claim's "
      "device class at admission)")
def _resource_claims(review: Review) -> Iterator[str]:
    if review.spec.get("resourceClaims"):
        yield "spec.resourceClaims asks DRA for devices outside the tenant's GPU policy (remove resourceClaims)"
    for _, kind, _, container in containers(review.pod):
        if (container.get("resources") or {}).get("claims"):
            yield f"{kind} {container.get('name')} uses resources.claims (remove them)"

