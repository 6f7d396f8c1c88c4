"""The admission guard's decisions, as pure functions of (pod, tenant, policy decision).

vCluster syncs a tenant's pods into its host namespace unchanged, so whatever a tenant writes in
its virtual cluster arrives here; these rules make the trust-based sharing policy hold for it.
``mutate_pod`` fills in what the tenant may leave out; ``validate_pod`` rejects what the tenant may
not ask for. Mutation never overwrites a value the tenant set: a foreign queue or scheduler is left
in place so that validation rejects it with a message instead of silently rewriting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterator

from kubernetes.utils import parse_quantity

from gputenant import naming
from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.policy.decision import Decision, PodRules

GPU_RESOURCE_PREFIX = "nvidia.com/"
DEFAULT_SCHEDULER = "default-scheduler"
"""What the apiserver defaults an unset schedulerName to, before any webhook sees the pod."""
FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
"""KAI-Scheduler GPU-sharing annotations; KAI does not isolate the pods sharing a GPU."""
ISOLATION_ENV_NAMES = ("CUDA_DISABLE_CONTROL", "GPU_CORE_UTILIZATION_POLICY", "NVIDIA_VISIBLE_DEVICES")
ISOLATION_ENV_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")
"""HAMi-core and NVIDIA container-runtime variables that switch off or widen GPU isolation."""
HAMI_MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_GPU_COUNT = "nvidia.com/gpu"

CONTAINER_KINDS = (("containers", "container"), ("initContainers", "init container"),
                   ("ephemeralContainers", "ephemeral container"))


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` is a stable id (also in docs/admission-guard.md), ``message`` says
    what is wrong and what to change."""

    rule: str
    message: str


def policy_summary(tenant_name: str, trust: Trust, decision: Decision) -> str:
    """The tenant's policy in one phrase, appended to every rejection so the tenant sees why."""
    mode = decision.mode.value if decision.mode else "none"
    pool = decision.pool.name if decision.pool else "none"
    return f"tenant {tenant_name}: trust {trust.value}, sharing {mode} on pool {pool}"


def rejection_message(violations: list[Violation], tenant_name: str, trust: Trust, decision: Decision) -> str:
    """One message for the apiserver to return: every violation, then the tenant's policy."""
    rules = "; ".join(f"[{v.rule}] {v.message}" for v in violations)
    return f"{rules} ({policy_summary(tenant_name, trust, decision)})"


# -- reading pods ------------------------------------------------------------------------------


def _containers(pod: dict) -> Iterator[tuple[str, str, int, dict]]:
    """(spec key, human kind, index, container) for every container, init and ephemeral included."""
    spec = pod.get("spec") or {}
    for key, kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(key) or []):
            yield key, kind, index, container


def container_gpu_amounts(container: dict) -> dict[str, Decimal]:
    """GPU extended resources of one container. Kubernetes makes requests equal limits for extended
    resources, and either alone counts, so the larger of the two is taken."""
    resources = container.get("resources") or {}
    amounts: dict[str, Decimal] = {}
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if name.startswith(GPU_RESOURCE_PREFIX):
                amounts[name] = max(amounts.get(name, Decimal(0)), parse_quantity(value))
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


def requests_gpus(pod: dict) -> bool:
    """Whether the pod asks for a GPU at all, by extended resource or by KAI fraction annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if any(name in annotations for name in FRACTION_ANNOTATIONS):
        return True
    return any(container_gpu_amounts(c) for _, _, _, c in _containers(pod))


def _tenant_queue(tenant_name: str, decision: Decision) -> str:
    return decision.queue.name if decision.queue else naming.queue_name(tenant_name)


def _pointer(segment: str) -> str:
    """Escape one JSON-pointer segment (RFC 6901): label keys and resource names contain '/'."""
    return segment.replace("~", "~0").replace("/", "~1")


def _number(amount: Decimal) -> str:
    return str(amount.normalize()) if amount != amount.to_integral_value() else str(int(amount))


# -- mutation ----------------------------------------------------------------------------------


def mutate_pod(pod: dict, tenant_name: str, decision: Decision, *, operation: str = "CREATE") -> list[dict]:
    """JSON-patch operations that put a GPU pod on the tenant's queue, scheduler and pool.

    Only pods that ask for GPUs are steered: the vCluster control plane and CoreDNS run in the same
    namespace and belong on ordinary nodes. Values the tenant set are never overwritten (validation
    rejects foreign ones). On UPDATE only labels may change, so only the queue label is filled.
    """
    if not decision.possible or decision.pool is None or not requests_gpus(pod):
        return []
    pool = decision.pool
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    patch: list[dict] = []

    labels = metadata.get("labels")
    queue = _tenant_queue(tenant_name, decision)
    if labels is None:
        patch.append({"op": "add", "path": "/metadata/labels", "value": {naming.QUEUE_LABEL: queue}})
    elif naming.QUEUE_LABEL not in labels:
        patch.append({"op": "add", "path": f"/metadata/labels/{_pointer(naming.QUEUE_LABEL)}", "value": queue})
    if operation != "CREATE":
        return patch

    scheduler = spec.get("schedulerName")
    if scheduler in (None, DEFAULT_SCHEDULER):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": pool.scheduler_name})

    node_selector = spec.get("nodeSelector")
    if pool.node_selector:
        if node_selector is None:
            patch.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(pool.node_selector)})
        else:
            for key, value in pool.node_selector.items():
                if key not in node_selector:
                    patch.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(key)}", "value": value})

    tolerations = spec.get("tolerations")
    wanted = [t.model_dump(exclude_none=True, by_alias=True) for t in pool.tolerations]
    missing = [t for t in wanted if t not in (tolerations or [])]
    if missing:
        if tolerations is None:
            patch.append({"op": "add", "path": "/spec/tolerations", "value": missing})
        else:
            patch.extend({"op": "add", "path": "/spec/tolerations/-", "value": t} for t in missing)

    rules = decision.pod_rules
    if decision.mode == SharingMode.HAMI and rules is not None and rules.default_limits:
        patch.extend(_hami_default_limits(spec, rules))
    return patch


def _hami_default_limits(spec: dict, rules: PodRules) -> Iterator[dict]:
    """Fill HAMi memory/core limits into containers that ask for vGPUs without them, so every share
    is capped (HAMi would otherwise hand out a whole GPU's memory)."""
    for key in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(key) or []):
            if HAMI_GPU_COUNT not in container_gpu_amounts(container):
                continue
            resources = container.get("resources")
            limits = (resources or {}).get("limits")
            missing = {
                name: value for name, value in rules.default_limits.items()
                if name not in (limits or {})
                and not (name == HAMI_MEMORY and HAMI_MEMORY_PERCENTAGE in (limits or {}))
            }
            if not missing:
                continue
            base = f"/spec/{key}/{index}/resources"
            if resources is None:
                yield {"op": "add", "path": base, "value": {"limits": missing}}
            elif limits is None:
                yield {"op": "add", "path": f"{base}/limits", "value": missing}
            else:
                for name, value in missing.items():
                    yield {"op": "add", "path": f"{base}/limits/{_pointer(name)}", "value": value}


# -- validation --------------------------------------------------------------------------------


def validate_pod(pod: dict, tenant_name: str, trust: Trust, decision: Decision, *,
                 operation: str = "CREATE") -> list[Violation]:
    """Every rule the pod breaks under the tenant's policy; empty when it may be admitted.

    Run after mutation, so a GPU pod is expected to carry the tenant's queue and scheduler already.
    ``nodeName`` is only checked on CREATE: a bound pod has one, and later label updates must pass.
    """
    violations: list[Violation] = []
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    gpu_pod = requests_gpus(pod)
    queue = _tenant_queue(tenant_name, decision)
    pool = decision.pool
    rules = decision.pod_rules if decision.possible else None

    pod_queue = labels.get(naming.QUEUE_LABEL)
    if pod_queue is not None and pod_queue != queue:
        violations.append(Violation("queue-label", f"label {naming.QUEUE_LABEL}={pod_queue} names another "
                                    f"queue; pods of this tenant use queue {queue} (remove the label)"))

    scheduler = spec.get("schedulerName", DEFAULT_SCHEDULER)
    allowed_schedulers = {pool.scheduler_name} if pool else set()
    if not gpu_pod:
        allowed_schedulers.add(DEFAULT_SCHEDULER)
    if operation == "CREATE" and allowed_schedulers and scheduler not in allowed_schedulers:
        violations.append(Violation("scheduler-name", f"schedulerName {scheduler} is not allowed; pods of this "
                                    f"tenant are placed by {' or '.join(sorted(allowed_schedulers))} "
                                    "(remove schedulerName)"))

    if gpu_pod and rules is None:
        reason = decision.message if not decision.possible else "the tenant has no GPU policy"
        violations.append(Violation("gpu-not-granted", f"the pod asks for GPUs but the tenant's GPU policy "
                                    f"cannot be applied: {reason}"))
    if rules is not None:
        violations.extend(_gpu_violations(pod, annotations, decision, rules))
        if gpu_pod and pool is not None and operation == "CREATE":
            node_selector = spec.get("nodeSelector") or {}
            for key, value in pool.node_selector.items():
                if node_selector.get(key, value) != value:
                    violations.append(Violation("node-selector", f"nodeSelector {key}={node_selector[key]} leaves "
                                                f"the tenant's pool; it must be {key}={value} (remove it)"))

    for _, kind, _, container in _containers(pod):
        if (container.get("securityContext") or {}).get("privileged"):
            violations.append(Violation("privileged", f"{kind} {container.get('name')} is privileged; "
                                        "privileged containers see every GPU of the node (remove securityContext.privileged)"))
    for field in ("hostPID", "hostIPC", "hostNetwork"):
        if spec.get(field):
            violations.append(Violation("host-namespaces", f"spec.{field} shares the node's namespaces with the "
                                        f"pod (remove spec.{field})"))

    if trust in (Trust.INTERNAL, Trust.UNTRUSTED) or (rules is not None and rules.forbid_isolation_overrides):
        for _, kind, _, container in _containers(pod):
            for variable in container.get("env") or []:
                name = variable.get("name", "")
                if name in ISOLATION_ENV_NAMES or name.startswith(ISOLATION_ENV_PREFIXES):
                    violations.append(Violation("isolation-env", f"{kind} {container.get('name')} sets {name}, "
                                                "which overrides GPU isolation (remove the variable)"))
        if operation == "CREATE" and spec.get("nodeName"):
            violations.append(Violation("node-name", f"spec.nodeName {spec['nodeName']} bypasses the scheduler "
                                        "and the tenant's pool (remove spec.nodeName)"))
    return violations


def _gpu_violations(pod: dict, annotations: dict, decision: Decision, rules: PodRules) -> Iterator[Violation]:
    mode = decision.mode.value if decision.mode else "none"
    granted = ", ".join(rules.gpu_resources) or "no GPU resources"
    seen: set[str] = set()
    for _, kind, _, container in _containers(pod):
        for name, amount in container_gpu_amounts(container).items():
            if name not in rules.gpu_resources:
                if name in seen:
                    continue
                seen.add(name)
                if decision.mode == SharingMode.MIG and name.startswith("nvidia.com/mig-"):
                    profile = name.removeprefix("nvidia.com/mig-")
                    yield Violation("mig-profile", f"MIG profile {profile} is not granted to the tenant; "
                                    f"request {granted}")
                else:
                    yield Violation("gpu-resource", f"{name} belongs to another sharing mechanism than {mode}; "
                                    f"request {granted}")
                continue
            limit = rules.max_per_container.get(name)
            if limit is not None and amount > limit:
                why = (" (time-sliced replicas add no compute; the pool fails larger requests)"
                       if decision.mode == SharingMode.TIME_SLICING else "")
                yield Violation("per-container-limit", f"{kind} {container.get('name')} requests {_number(amount)} "
                                f"{name}; at most {limit} per container{why}")
    for name, amount in pod_gpu_amounts(pod).items():
        limit = rules.max_per_pod.get(name)
        if name in rules.gpu_resources and limit is not None and amount > limit:
            yield Violation("per-pod-limit", f"the pod requests {_number(amount)} {name}; the tenant's limit "
                            f"is {limit} per pod")
    if not rules.allow_fraction_annotations:
        for name in FRACTION_ANNOTATIONS:
            if name in annotations:
                yield Violation("fraction-annotation", f"annotation {name} asks KAI for a shared GPU, which "
                                f"sharing {mode} does not allow (remove it)")


def pod_summary(pod: dict) -> dict[str, Any]:
    """What the guard remembers of a running GPU pod: its GPU resources (for MIG-change checks)."""
    return {name: _number(amount) for name, amount in pod_gpu_amounts(pod).items()}
