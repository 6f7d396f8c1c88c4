"""The admission guard's rules: a registry of small checks, each with an id, the trust levels it
applies to and the one-line summary the docs' rule table is written from.

vCluster syncs a tenant's pods into its host namespace unchanged, and a tenant is cluster-admin of
its virtual cluster, so every pod there is shaped by the tenant. Each rule is an allow-list: what a
pod of that trust may say, everything else refused with a message naming the field and the fix.
Rules run after mutation (``guard.mutation``). On UPDATE only what the update adds is refused:
a rule the old object already broke (a pod admitted under an older policy) does not block KAI's
or the kubelet's later writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.models import CpuPool, GuardConfig, OperatorConfig
from gputenant.guard import kai_sharing, keys
from gputenant.guard.gangs import POD_GROUP_ANNOTATION, GangError, asks_for_gang, gang_name, gang_size, guard_gang
from gputenant.guard.mutation import DEFAULT_SCHEDULER, NO_DEVICES, VISIBLE_DEVICES, allows_fractions
from gputenant.guard.pods import asks_for_fraction, container_gpu_amounts, containers, number, pod_gpu_amounts, resource_names
from gputenant.guard.registry import ALL_TRUST, RULES, STRICT, Review, Violation, rule
from gputenant.policy.decision import Decision

ISOLATION_ENV_FAMILIES = ("CUDA_", "GPU_", "LIBCUDA_", "HAMI_", "VGPU_", "ACTIVE_OOM_KILLER", "LD_PRELOAD",
                          "LD_AUDIT")
"""Variable prefixes HAMi-core and the dynamic loader read (CUDA_DEVICE_MEMORY_LIMIT*, CUDA_DEVICE_SM_LIMIT*,
CUDA_DISABLE_CONTROL, GPU_CORE_UTILIZATION_POLICY, CUDA_TASK_PRIORITY, LIBCUDA_LOG_LEVEL, ...;
LD_PRELOAD libraries load before HAMi-core's /etc/ld.so.preload and can shadow it)."""
ISOLATION_ENV_ALLOWED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                         "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_HOME", "CUDA_PATH",
                         "CUDA_VERSION")
"""Variables of those families that only narrow or describe what the container already has."""
DEVICE_ENV_FAMILIES = ("NVIDIA_",)
"""NVIDIA container-runtime variables (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_MIG_*):
they choose which GPUs and driver features a container sees, whatever its resources say."""
HAMI_CORE_PATHS = ("/etc/ld.so.preload", "/usr/local/vgpu/libvgpu.so")
"""What HAMi's device plugin mounts to load HAMi-core; a volume mounted on or above them hides it."""
GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION = keys.FRACTION_ANNOTATIONS
"""KAI's requests for a share of one GPU: a portion (0 < x < 1) or MiB of its memory."""
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
DEVICE_CLASS_RESOURCE = ".deviceclass.resource.k8s.io/devices"
POD_SPEC_FIELDS = frozenset({
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy",
    "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork", "hostPID", "hostUsers",
    "hostname", "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources",
    "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates", "securityContext", "serviceAccount",
    "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain",
    "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes",
})
"""Pod spec fields the rules below account for; a field a newer Kubernetes adds is refused until
a rule has looked at it."""


def _violations(review: Review) -> list[Violation]:
    return [Violation(r.id, message) for r in RULES.values() if review.trust in r.trust for message in r.check(review)]


def validate_pod(pod: dict, tenant_name: str, trust: Trust, decision: Decision, *, operation: str = "CREATE",
                 old: dict | None = None, config: OperatorConfig | None = None,
                 by_tenant: bool = True) -> list[Violation]:
    """Every rule the pod breaks under the tenant's policy; empty when it may be admitted. On UPDATE,
    only violations the old object did not already have."""
    settings = config.guard if config else GuardConfig()
    cpu_pool = config.cpu_pool if config else CpuPool()
    pool_keys = frozenset(pool_keys_of(config)) if config else frozenset(
        decision.pool.node_selector if decision.pool else ())
    review = Review(pod, tenant_name, trust, decision, operation, old, settings, pool_keys, by_tenant, cpu_pool)
    found = _violations(review)
    if operation == "CREATE" or old is None:
        return found
    before = set(_violations(Review(old, tenant_name, trust, decision, operation, old, settings, pool_keys,
                                    by_tenant, cpu_pool)))
    return [v for v in found if v not in before]


def pool_keys_of(config: OperatorConfig) -> set[str]:
    """Node label and taint keys of every GPU pool and of the CPU pool."""
    selectors = [pool.node_selector for pool in config.pools] + [config.cpu_pool.node_selector]
    tolerations = [pool.tolerations for pool in config.pools] + [config.cpu_pool.tolerations]
    return ({key for selector in selectors for key in selector}
            | {t.key for listed in tolerations for t in listed if t.key})


def policy_summary(tenant_name: str, trust: Trust, decision: Decision) -> str:
    """The tenant's policy in one phrase, appended to every rejection so the tenant sees why."""
    mode = decision.mode.value if decision.mode else "none"
    pool = decision.pool.name if decision.pool else "none"
    return f"tenant {tenant_name}: trust {trust.value}, sharing {mode} on pool {pool}"


def rejection_message(violations: list[Violation], tenant_name: str, trust: Trust, decision: Decision) -> str:
    """One message for the apiserver to return: every violation, then the tenant's policy."""
    rules = "; ".join(f"[{v.rule}] {v.message}" for v in violations)
    return f"{rules} ({policy_summary(tenant_name, trust, decision)})"


# -- identity: queue, scheduler, KAI's and HAMi's keys -----------------------------------------


@rule("queue-label", "a `kai.scheduler/queue` label naming another queue than the tenant's")
def _queue_label(review: Review) -> Iterator[str]:
    pod_queue = review.labels.get(keys.QUEUE_LABEL)
    if pod_queue is not None and pod_queue != review.queue:
        yield (f"label {keys.QUEUE_LABEL}={pod_queue} names another queue; pods of this tenant use queue "
               f"{review.queue} (remove the label)")


@rule("scheduler-key", "KAI's, HAMi's and the operator's own label/annotation keys (`project`, "
      "`priorityClassName`, `kai.scheduler/*`, `pod-group-name`, `runai/*`, `hami.io/*`, `nvidia.com/*`, "
      "`gputenant.io/*`, ...) set by the tenant (not the gang `pod-group-name` the guard sets); on UPDATE only "
      "changes from the tenant's side")
def _scheduler_keys(review: Review) -> Iterator[str]:
    if review.operation != "CREATE" and not review.by_tenant:
        return
    for kind, present, exact, allowed in (
            ("label", review.labels, keys.KAI_LABELS, (keys.QUEUE_LABEL,)),
            ("annotation", review.annotations, keys.KAI_ANNOTATIONS,
             (*keys.FRACTION_ANNOTATIONS, *keys.TENANT_ALLOWED_ANNOTATIONS, kai_sharing.CONFIGMAP_ANNOTATION))):
        for key in sorted(present):
            if kind == "annotation" and key == POD_GROUP_ANNOTATION and review.gpu_pod \
                    and guard_gang(review.pod, review.tenant):
                continue
            if key not in allowed and keys.is_reserved(key, exact):
                yield (f"{kind} {key} is read by the GPU scheduler or vGPU stack to choose a queue, group, "
                       f"priority or device; tenants may not set it (remove the {kind})")


@rule("gang", f"a `{keys.GANG_SIZE_ANNOTATION}` that is not 2..1024, on a pod without GPUs or without an owner "
      "in the virtual cluster")
def _gang(review: Review) -> Iterator[str]:
    if review.operation != "CREATE" or not asks_for_gang(review.pod):
        return
    if not review.gpu_pod:
        yield (f"annotation {keys.GANG_SIZE_ANNOTATION} is set on a pod without GPUs; only GPU pods are "
               "gang-scheduled (remove the annotation)")
        return
    for check in (gang_size, lambda pod: gang_name(pod, review.tenant)):
        try:
            check(review.pod)
        except GangError as error:
            yield str(error)


def _kai_prefix(review: Review) -> str | None:
    """The pod's KAI GPU-sharing ConfigMap prefix when KAI's references may hang on it: a fraction pod of a
    mode that allows fractions, carrying the prefix the guard's mutation gives it; None otherwise."""
    prefix = review.annotations.get(kai_sharing.CONFIGMAP_ANNOTATION)
    if prefix is None or not allows_fractions(review.decision) or not asks_for_fraction(review.pod):
        return None
    return prefix if prefix == kai_sharing.guard_prefix(review.pod) else None


def _kai_container(key: str, index: int) -> bool:
    return key == "containers" and index == kai_sharing.FRACTION_CONTAINER


@rule("kai-sharing", f"a `{kai_sharing.CONFIGMAP_ANNOTATION}` annotation on a pod that asks for no KAI fraction, "
      "or other than the prefix the guard's mutation writes (`<15 characters of the pod or owner name>-<SHA-256 "
      "of namespace/name>-shared-gpu`, replacing the tenant's), or changed after creation; a fraction pod without "
      "a `metadata.name`; KAI's env, `envFrom` and volume are admitted only for the guard's prefix")
def _kai_sharing(review: Review) -> Iterator[str]:
    key = kai_sharing.CONFIGMAP_ANNOTATION
    prefix = review.annotations.get(key)
    if review.operation != "CREATE" and review.old is not None:
        before = ((review.old.get("metadata") or {}).get("annotations") or {}).get(key)
        if prefix != before:
            yield (f"annotation {key} changed on a created pod; KAI's binder writes the pod's GPU into the "
                   "ConfigMaps it names (create a new pod instead)")
    fraction = asks_for_fraction(review.pod)
    expected = kai_sharing.guard_prefix(review.pod)
    if fraction and expected is None:
        yield ("a pod asking for a GPU fraction needs metadata.name: the guard's mutation derives its KAI ConfigMap "
               "prefix from it (set metadata.name)")
        return
    if prefix is None:
        return
    if not fraction:
        yield f"annotation {key} names KAI GPU-sharing ConfigMaps, but the pod asks for no GPU fraction (remove it)"
        return
    if prefix != expected:
        unnamed = (" (a generateName is resolved after mutation: set metadata.name)"
                   if (review.pod.get("metadata") or {}).get("generateName") else "")
        yield (f"annotation {key}={prefix!r} is not the prefix the guard's mutation gives this pod ({expected!r})"
               f"{unnamed}; the guard sets it, tenants may not (remove the annotation)")


@rule("scheduler-name", "a pod on a scheduler other than the pool's (GPU pods) or `default-scheduler` "
      "and the pool's (other pods)")
def _scheduler_name(review: Review) -> Iterator[str]:
    pool = review.decision.pool
    allowed = {pool.scheduler_name} if pool else set()
    if not review.gpu_pod:
        allowed.add(DEFAULT_SCHEDULER)
    scheduler = review.spec.get("schedulerName", DEFAULT_SCHEDULER)
    if allowed and scheduler not in allowed:
        yield (f"schedulerName {scheduler} is not allowed; pods of this tenant are placed by "
               f"{' or '.join(sorted(allowed))} (remove schedulerName)")


@rule("priority-class", "a `priorityClassName` not in the configuration's `guard.priorityClassNames` "
      "(KAI derives priority and preemptibility from it)")
def _priority_class(review: Review) -> Iterator[str]:
    yield from _granted_name(review, "priorityClassName", review.settings.priority_class_names)


def _granted_name(review: Review, field: str, granted: Iterable[str]) -> Iterator[str]:
    """A pod spec field naming a cluster object (a class) that the configuration must grant."""
    name = review.spec.get(field)
    if name and name not in granted:
        allowed = ", ".join(granted) or "none"
        yield f"{field} {name} is not granted to tenants (allowed: {allowed}); remove {field}"


# -- GPU resources -----------------------------------------------------------------------------


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
        return (f"no GPU resource but annotation {GPU_FRACTION_ANNOTATION}: \"{_decimal(rules.fraction_share)}\" "
                "(KAI GPU fractions)")
    return ", ".join(rules.gpu_resources) if rules and rules.gpu_resources else "no GPU resources"


@rule("mig-profile", "a MIG profile the tenant was not granted")
def _mig_profile(review: Review) -> Iterator[str]:
    if review.decision.mode != SharingMode.MIG:
        return
    for name in _foreign_gpu_resources(review):
        if name.startswith("nvidia.com/mig-"):
            yield (f"MIG profile {name.removeprefix('nvidia.com/mig-')} is not granted to the tenant; "
                   f"request {_granted(review)}")


@rule("gpu-resource", "an `nvidia.com/*` resource of another mechanism than the tenant's (e.g. `nvidia.com/gpu` "
      "for a MIG tenant, `nvidia.com/gpumem-percentage`, which the quota cannot count)")
def _gpu_resource(review: Review) -> Iterator[str]:
    for name in _foreign_gpu_resources(review):
        if review.decision.mode == SharingMode.MIG and name.startswith("nvidia.com/mig-"):
            continue
        yield f"{name} belongs to another sharing mechanism than {review.mode}; request {_granted(review)}"


@rule("per-container-limit", "more than the policy allows per container (1 time-sliced replica when the pool "
      "fails larger requests)")
def _per_container(review: Review) -> Iterator[str]:
    rules = review.rules
    if rules is None:
        return
    why = (" (time-sliced replicas add no compute; the pool fails larger requests)"
           if review.decision.mode == SharingMode.TIME_SLICING else "")
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
               f"{GPU_FRACTION_ANNOTATION}: \"{_decimal(share)}\" (its memory is that portion of the GPU)")
    written = review.annotations.get(GPU_FRACTION_ANNOTATION)
    if written is None:
        return
    fix = (f"set {GPU_FRACTION_ANNOTATION} to a multiple of {_decimal(share)} up to {_decimal(largest)}"
           if largest >= share else "the tenant's limit holds no share")
    try:
        fraction = Fraction(Decimal(written.strip()))
    except (InvalidOperation, ValueError, OverflowError):
        yield f"annotation {GPU_FRACTION_ANNOTATION}={written!r} is not a number; {fix}"
        return
    if fraction <= 0 or fraction % share or fraction > largest:
        yield (f"annotation {GPU_FRACTION_ANNOTATION}={written} is not a whole number of the tenant's "
               f"{_decimal(share)} GPU shares within its limit; {fix}")


def _decimal(value: Fraction) -> str:
    return format(value.numerator / value.denominator, "g")


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


# -- placement ---------------------------------------------------------------------------------


@rule("node-selector", "a `nodeSelector` naming a pool key with another value than the tenant's pool (every pod)")
def _node_selector(review: Review) -> Iterator[str]:
    own = review.pool_selector
    for key, value in (review.spec.get("nodeSelector") or {}).items():
        if key in review.pool_keys | set(own) and own.get(key) != value:
            wanted = f"it must be {key}={own[key]}" if key in own else "the tenant has no pool there"
            yield f"nodeSelector {key}={value} leaves the tenant's pool; {wanted} (remove it)"


@rule("node-affinity", "node affinity on a pool key with values outside the tenant's pool, or `matchFields` "
      "(node names)")
def _node_affinity(review: Review) -> Iterator[str]:
    node_affinity = (review.spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    terms = list(required or []) + [p.get("preference") or {} for p in
                                    node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    own = review.pool_selector
    for term in terms:
        if term.get("matchFields"):
            yield "node affinity matchFields picks nodes by name, past the tenant's pool (remove matchFields)"
        for expression in term.get("matchExpressions") or []:
            key = expression.get("key")
            if key not in review.pool_keys | set(own):
                continue
            values = set(expression.get("values") or [])
            if expression.get("operator") != "In" or key not in own or values != {own[key]}:
                yield (f"node affinity on {key} ({expression.get('operator')} {sorted(values)}) reaches other "
                       "pools' nodes; the guard sets the tenant's pool (remove the expression)")


@rule("toleration", "a toleration of every taint (no key), or of a pool taint with another value than the "
      "tenant's pool")
def _tolerations(review: Review) -> Iterator[str]:
    own = review.placement[1]
    for toleration in review.spec.get("tolerations") or []:
        key = toleration.get("key")
        if not key:
            yield "a toleration without key tolerates every taint, other pools' included (give it a key)"
        elif key in review.pool_keys and toleration not in own:
            yield (f"toleration of {key} ({toleration.get('operator', 'Equal')} {toleration.get('value', '')}) "
                   "reaches other pools' nodes; the guard adds the tenant's pool toleration (remove it)")


@rule("node-name", "`spec.nodeName` set at creation (bypasses the scheduler and the pool)")
def _node_name(review: Review) -> Iterator[str]:
    if review.operation == "CREATE" and review.spec.get("nodeName"):
        yield (f"spec.nodeName {review.spec['nodeName']} bypasses the scheduler and the tenant's pool "
               "(remove spec.nodeName)")


@rule("runtime-class", "a `runtimeClassName` not in the configuration's `guard.runtimeClassNames` (the nvidia "
      "runtime shows a container the GPUs its variables name)")
def _runtime_class(review: Review) -> Iterator[str]:
    yield from _granted_name(review, "runtimeClassName", review.settings.runtime_class_names)


# -- the node and the GPU's software isolation -------------------------------------------------


@rule("privileged", "a privileged container, init or ephemeral container")
def _privileged(review: Review) -> Iterator[str]:
    for _, kind, _, container in containers(review.pod):
        if (container.get("securityContext") or {}).get("privileged"):
            yield (f"{kind} {container.get('name')} is privileged; privileged containers see every GPU of the "
                   "node (remove securityContext.privileged)")


@rule("host-namespaces", "`hostPID`, `hostIPC`, `hostNetwork`")
def _host_namespaces(review: Review) -> Iterator[str]:
    for name in ("hostPID", "hostIPC", "hostNetwork"):
        if review.spec.get(name):
            yield f"spec.{name} shares the node's namespaces with the pod (remove spec.{name})"


@rule("device-env", "`NVIDIA_*` container-runtime variables (GPU visibility and driver features), except the "
      "guard's own `NVIDIA_VISIBLE_DEVICES=void` in containers without GPUs and KAI's reference to the "
      "pod's own GPU-sharing ConfigMap in a fraction pod's first container")
def _device_env(review: Review) -> Iterator[str]:
    prefix = _kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for variable in container.get("env") or []:
            name = variable.get("name", "")
            if not name.startswith(DEVICE_ENV_FAMILIES) or _kai_env(prefix, key, index, variable):
                continue
            if (name == VISIBLE_DEVICES and variable.get("value") == NO_DEVICES and "valueFrom" not in variable
                    and not container_gpu_amounts(container)):
                continue
            yield (f"{kind} {container.get('name')} sets {name}, which chooses the GPUs the container sees "
                   "(remove the variable)")


def _kai_env(prefix: str | None, key: str, index: int, variable: dict) -> bool:
    return prefix is not None and _kai_container(key, index) and kai_sharing.is_kai_env(variable, prefix)


def _isolation_variable(name: str) -> bool:
    return name.startswith(ISOLATION_ENV_FAMILIES) and name not in ISOLATION_ENV_ALLOWED


@rule("isolation-env", "variables HAMi-core or the loader read (`CUDA_*`, `GPU_*`, `LIBCUDA_*`, `HAMI_*`, "
      "`ACTIVE_OOM_KILLER`, `LD_PRELOAD`, `LD_AUDIT`) except a few that only narrow (`CUDA_VISIBLE_DEVICES`, ...)",
      STRICT)
def _isolation_env(review: Review) -> Iterator[str]:
    prefix = _kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for variable in container.get("env") or []:
            name = variable.get("name", "")
            if _isolation_variable(name) and not _kai_env(prefix, key, index, variable):
                yield f"{kind} {container.get('name')} sets {name}, which overrides GPU isolation (remove the variable)"


def _families(review: Review) -> tuple[str, ...]:
    return DEVICE_ENV_FAMILIES + (ISOLATION_ENV_FAMILIES if review.trust in STRICT else ())


@rule("env-from", "`envFrom` whose prefix could produce a guarded variable (`NVIDIA_*`; for Internal and "
      "Untrusted also the isolation families): a ConfigMap's keys are not known at admission; except KAI's "
      "`envFrom` of the pod's own `-evar` ConfigMap in a fraction pod's first container")
def _env_from(review: Review) -> Iterator[str]:
    families = _families(review)
    kai_prefix = _kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for source in container.get("envFrom") or []:
            if (kai_prefix is not None and _kai_container(key, index)
                    and kai_sharing.is_kai_env_from(source, kai_prefix)):
                continue
            prefix = source.get("prefix", "")
            if any(family.startswith(prefix) or prefix.startswith(family) for family in families):
                what = f"prefix {prefix!r}" if prefix else "no prefix"
                yield (f"{kind} {container.get('name')} takes variables from envFrom with {what}, so GPU isolation "
                       "variables could arrive unseen; set envFrom[].prefix to one no GPU variable starts with, "
                       "e.g. APP_")


@rule("hami-preload", "a volume mounted on or above HAMi-core's `/etc/ld.so.preload` or "
      "`/usr/local/vgpu/libvgpu.so`", STRICT)
def _hami_preload(review: Review) -> Iterator[str]:
    for _, kind, _, container in containers(review.pod):
        for mount in container.get("volumeMounts") or []:
            path = (mount.get("mountPath") or "").rstrip("/") or "/"
            for guarded in HAMI_CORE_PATHS:
                if guarded == path or guarded.startswith(path if path.endswith("/") else path + "/"):
                    yield (f"{kind} {container.get('name')} mounts a volume at {mount.get('mountPath')}, which "
                           f"hides {guarded} that loads GPU isolation (mount it elsewhere)")
                    break


@rule("pod-field", "a pod spec field no rule accounts for (fields added by newer Kubernetes versions)")
def _pod_fields(review: Review) -> Iterator[str]:
    for name in sorted(set(review.spec) - POD_SPEC_FIELDS):
        yield f"spec.{name} is not reviewed by the admission guard yet (remove it)"


def rule_table() -> str:
    """The docs' rule table (docs/admission-guard.md), one row per registered rule, in order."""
    rows = ["| rule | refuses | trust |", "|---|---|---|"]
    for r in RULES.values():
        trust = "all" if r.trust == ALL_TRUST else ", ".join(t.value for t in Trust if t in r.trust)
        rows.append(f"| `{r.id}` | {r.refuses} | {trust} |")
    return "\n".join(rows)
