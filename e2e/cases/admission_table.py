"""The pod table of the admission guard: for each sharing mode (TimeSlicing, HAMi, MIG, Exclusive),
the pods its tenant may create and how the guard leaves them (untouched, capped, steered), and the pods
it refuses with the rules it names. e2e/tests/test_guard_admission.py creates each through the real
API server as the tenant's own identity; the case ids are the ones docs/threat-model.md cites.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from gputenant.config.models import OperatorConfig
from gputenant.guard import hami_caps, kai_sharing
from kubeplane.builders import POOL_LABEL, container, pod, sharing_pools
from kubeplane.builders import placed_pool as pool
from kubeplane.tools import REPO_ROOT

TENANT_CRD = REPO_ROOT / "crds" / "tenant.yaml"
QUEUE = "kai.scheduler/queue"
POOL_KEY = POOL_LABEL


CONFIG = OperatorConfig.model_validate({"pools": [*sharing_pools(), pool("whole", "Exclusive", model="H100-80GB")]})


@dataclass(frozen=True, eq=False)
class Mode:
    tenant: str
    trust: str
    pool: str
    gpu: str
    """The resource a pod of this tenant asks for ("" for HAMi: its pods ask a share by annotation)."""
    granted: str
    """How the guard lists the tenant's resources in messages."""
    foreign_gpu: str
    max_per_pod: int
    defaults: dict = field(default_factory=dict)
    extra_spec: dict = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return f"tenant-{self.tenant}"

    @property
    def policy(self) -> str:
        return f"tenant {self.tenant}: trust {self.trust}, sharing {MODE_NAMES[self]} on pool {self.pool}"


TIME_SLICING = Mode("ts-team", "Trusted", "ts", "nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", 4)
HAMI = Mode("hami-team", "Internal", "hami", "", 'no GPU resource but annotation gpu-fraction: "0.25" (KAI GPU fractions)',
            "nvidia.com/mig-1g.10gb", 0)
"""HAMi mode is KAI GPU fractions (docs/units.md): a GPU pod asks `gpu-fraction`, not a resource."""
SHARE = {"gpu-fraction": "0.25"}


def after_kai(manifest: dict, name: str, mode: Mode) -> dict:
    """The pod named `name` as KAI v0.12.0's admission webhook leaves it after the guard's mutation
    (`kai_sharing.with_kai_shape` for the guard's prefix, which KAI keeps; the plane runs no KAI webhook),
    which is what the guard's validation sees after every mutation."""
    named = {**manifest, "metadata": {**{k: v for k, v in manifest["metadata"].items() if k != "generateName"},
                                      "name": name}}
    prefix = kai_sharing.guard_prefix({"metadata": {"name": name, "namespace": mode.namespace}})
    assert prefix is not None
    return kai_sharing.with_kai_shape(named, prefix)
MIG = Mode("mig-team", "Untrusted", "mig", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu", 7,
           extra_spec={"sharing": {"mig": {"profile": "1g.10gb"}}})
EXCLUSIVE = Mode("excl-team", "Untrusted", "whole", "nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", 2,
                 extra_spec={"sharing": {"mode": "Exclusive"}, "gpu": {"quota": 1, "limit": 2}})
MODE_NAMES = {TIME_SLICING: "TimeSlicing", HAMI: "HAMi", MIG: "MIG", EXCLUSIVE: "Exclusive"}


# -- pods and expected outcomes ----------------------------------------------------------------


@dataclass
class Admitted:
    """The stored pod's scheduling fields, container limits and HAMi-core caps, exactly."""

    labels: dict
    scheduler: str
    node_selector: dict
    tolerations: list
    limits: list
    caps: dict = field(default_factory=dict)
    """HAMi-core's variables in the first container, the init containers and the read-only mounts of the
    guard's library volume (empty for a pod without caps)."""


def caps_view(spec: dict) -> dict:
    first = spec["containers"][0]
    env = {v["name"]: v.get("value") for v in first.get("env") or [] if v["name"] in hami_caps.CAP_VARIABLES}
    if not env:
        return {}
    return {"env": env, "init": [c["name"] for c in spec.get("initContainers", [])],
            "readOnly": sorted(m["mountPath"] for m in first.get("volumeMounts") or []
                               if m.get("readOnly") and m["name"] == hami_caps.LIBRARY_VOLUME)}


def untouched(manifest: dict) -> Admitted:
    spec = manifest["spec"]
    return Admitted(labels=manifest["metadata"].get("labels", {}), scheduler=spec.get("schedulerName", "default-scheduler"),
                    node_selector=spec.get("nodeSelector", {}), tolerations=spec.get("tolerations", []),
                    limits=[(c.get("resources") or {}).get("limits", {})
                            for c in spec.get("initContainers", []) + spec["containers"]], caps=caps_view(spec))


def capped(mode: Mode, manifest: dict, base: Admitted) -> tuple[list, dict]:
    """(limits, caps) of a HAMi share as the guard stores it: its library init container first, and the caps
    of its fraction of the pool's GPU (CONFIG's pools have 81920 MiB GPUs)."""
    fraction = (manifest["metadata"].get("annotations") or {}).get("gpu-fraction")
    pool = CONFIG.pool(mode.pool)
    if mode is not HAMI or fraction is None or pool is None:
        return base.limits, base.caps
    caps = hami_caps.caps_for(Fraction(fraction), pool)
    init = hami_caps.init_container(hami_caps.library_settings(pool))
    tenant_init = [c["name"] for c in manifest["spec"].get("initContainers", [])]
    return [init["resources"]["limits"], *base.limits], {
        "env": {v["name"]: v["value"] for v in caps.env()}, "init": [hami_caps.INIT_CONTAINER, *tenant_init],
        "readOnly": sorted([hami_caps.LIBRARY_DIR, hami_caps.OVERRIDE_ENV_FILE, hami_caps.PRELOAD])}


def steered(mode: Mode, manifest: dict, limits: list | None = None) -> Admitted:
    """What the guard should make of a GPU pod: the tenant's queue, KAI, the pool's selector and
    toleration; `limits` overrides the containers' limits (HAMi defaults)."""
    base = untouched(manifest)
    base.limits = limits if limits is not None else base.limits
    all_limits, caps = capped(mode, manifest, base)
    return Admitted(
        labels={**base.labels, QUEUE: mode.tenant}, scheduler="kai-scheduler",
        node_selector={**base.node_selector, POOL_KEY: mode.pool},
        tolerations=base.tolerations + [{"key": POOL_KEY, "operator": "Equal", "value": mode.pool, "effect": "NoSchedule"}],
        limits=all_limits, caps=caps)


def denied(mode: Mode, *violations: str) -> str:
    return f'admission webhook "pods.validate.gputenant.io" denied the request: {"; ".join(violations)} ({mode.policy})'


@dataclass
class Case:
    id: str
    manifest: dict
    admitted: Admitted | None = None
    message: str | None = None


def cases(mode: Mode) -> list[Case]:
    hami = mode is HAMI
    gpu = {} if hami else {mode.gpu: "1"}
    strict = mode.trust != "Trusted"
    one_gpu_limits = [{**gpu, **mode.defaults}]
    result: list[Case] = []

    def gpu_pod(*containers: dict, **fields) -> dict:
        """A GPU pod of the mode: its GPU containers ask `gpu`, a HAMi pod also carries its share."""
        if hami:
            fields["annotations"] = {**SHARE, **(fields.get("annotations") or {})}
        return pod(*containers, **fields)

    def allowed(id_: str, manifest: dict, admitted: Admitted | None = None) -> None:
        result.append(Case(id_, manifest, admitted=admitted or untouched(manifest)))

    def rejected(id_: str, manifest: dict, *violations: str) -> None:
        result.append(Case(id_, manifest, message=denied(mode, *violations)))

    def isolation(id_: str, manifest: dict, violation: str) -> None:
        (rejected(id_, manifest, violation) if strict else allowed(id_, manifest))

    allowed("plain-pod-untouched", pod())
    m = gpu_pod(container(limits=gpu))
    allowed("gpu-pod-steered", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container(limits=gpu), labels={"app": "train"})
    allowed("own-labels-kept", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container(limits=gpu), nodeSelector={"topology.kubernetes.io/zone": "a"})
    allowed("own-node-selector-merged", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container(limits=gpu), tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])
    allowed("own-toleration-kept-first", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container(limits=gpu), schedulerName="kai-scheduler")
    allowed("explicit-kai-scheduler", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container(limits=gpu), labels={QUEUE: mode.tenant})
    allowed("own-queue-label", m, steered(mode, m, one_gpu_limits))
    m = gpu_pod(container("a", limits=gpu), container("b"))
    allowed("only-gpu-container-filled", m, steered(mode, m, one_gpu_limits + [{}]))
    m = gpu_pod(container(), initContainers=[container("warmup", limits=gpu)])
    allowed("gpu-init-container-steered", m, steered(mode, m, one_gpu_limits + [{}]))
    rejected("foreign-queue-label", gpu_pod(container(limits=gpu), labels={QUEUE: "other-team"}),
             f"[queue-label] label {QUEUE}=other-team names another queue; pods of this tenant use queue "
             f"{mode.tenant} (remove the label)")
    rejected("foreign-queue-on-cpu-pod", pod(labels={QUEUE: "other-team"}),
             f"[queue-label] label {QUEUE}=other-team names another queue; pods of this tenant use queue "
             f"{mode.tenant} (remove the label)")
    rejected("foreign-scheduler-gpu-pod", gpu_pod(container(limits=gpu), schedulerName="my-scheduler"),
             "[scheduler-name] schedulerName my-scheduler is not allowed; pods of this tenant are placed by "
             "kai-scheduler (remove schedulerName)")
    rejected("foreign-scheduler-cpu-pod", pod(schedulerName="my-scheduler"),
             "[scheduler-name] schedulerName my-scheduler is not allowed; pods of this tenant are placed by "
             "default-scheduler or kai-scheduler (remove schedulerName)")
    rejected("other-pool-node-selector", gpu_pod(container(limits=gpu), nodeSelector={POOL_KEY: "elsewhere"}),
             f"[node-selector] nodeSelector {POOL_KEY}=elsewhere leaves the tenant's pool; it must be "
             f"{POOL_KEY}={mode.pool} (remove it)")
    rejected("privileged-container", pod(container(securityContext={"privileged": True})),
             "[privileged] container main is privileged; privileged containers see every GPU of the node "
             "(remove securityContext.privileged)")
    rejected("privileged-init-container", pod(container(), initContainers=[container("setup", securityContext={"privileged": True})]),
             "[privileged] init container setup is privileged; privileged containers see every GPU of the node "
             "(remove securityContext.privileged)")
    for host_field in ("hostPID", "hostIPC", "hostNetwork"):
        rejected(f"{host_field}", pod(**{host_field: True}),
                 f"[host-namespaces] spec.{host_field} shares the node's namespaces with the pod (remove spec.{host_field})")
    isolation("env-cuda-disable-control", pod(container(env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}])),
              "[isolation-env] container main sets CUDA_DISABLE_CONTROL, which overrides GPU isolation (remove the variable)")
    isolation("env-core-utilization-policy", pod(container(env=[{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"}])),
              "[isolation-env] container main sets GPU_CORE_UTILIZATION_POLICY, which overrides GPU isolation (remove the variable)")
    isolation("env-memory-limit-in-init", pod(container(), initContainers=[
              container("setup", env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"}])]),
              "[isolation-env] init container setup sets CUDA_DEVICE_MEMORY_LIMIT_0, which overrides GPU isolation (remove the variable)")
    isolation("env-sm-limit", pod(container(env=[{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}])),
              "[isolation-env] container main sets CUDA_DEVICE_SM_LIMIT, which overrides GPU isolation (remove the variable)")
    rejected("env-visible-devices", pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
             "[device-env] container main sets NVIDIA_VISIBLE_DEVICES, which chooses the GPUs the container sees "
             "(remove the variable)")
    rejected("preset-node-name", pod(nodeName="gpu-node-1"),
             "[node-name] spec.nodeName gpu-node-1 bypasses the scheduler and the tenant's pool (remove spec.nodeName)")
    rejected("gpu-of-another-mechanism", pod(container(limits={mode.foreign_gpu: "1"})),
             *([f"[mig-profile] MIG profile {mode.foreign_gpu.removeprefix('nvidia.com/mig-')} is not granted to the "
                f"tenant; request {mode.granted}"] if mode is MIG and mode.foreign_gpu.startswith("nvidia.com/mig-") else
               [f"[gpu-resource] {mode.foreign_gpu} belongs to another sharing mechanism than {MODE_NAMES[mode]}; "
                f"request {mode.granted}"]))
    if hami:
        hami_cases(mode, allowed, rejected)
    else:
        over = mode.max_per_pod + 1
        if mode is TIME_SLICING:
            rejected("more-than-the-tenant-per-pod", pod(*[container(f"c{i}", limits=gpu) for i in range(over)]),
                     f"[per-pod-limit] the pod requests {over} nvidia.com/gpu; the tenant's limit is 4 per pod")
        else:
            rejected("more-than-the-tenant-per-pod", pod(container(limits={mode.gpu: str(over)})),
                     f"[per-pod-limit] the pod requests {over} {mode.gpu}; the tenant's limit is {mode.max_per_pod} "
                     "per pod")
        for annotation, value in (("gpu-fraction", "0.5"), ("gpu-memory", "4096")):
            manifest = pod(annotations={annotation: value})
            if mode is TIME_SLICING:
                allowed(f"kai-{annotation}-annotation", manifest, steered(mode, manifest))
                shaped = after_kai(manifest, f"kai-shaped-{annotation}", mode)
                allowed(f"kai-{annotation}-as-kais-admission-leaves-it", shaped, steered(mode, shaped))
            else:
                rejected(f"kai-{annotation}-annotation", manifest,
                         f"[fraction-annotation] annotation {annotation} asks KAI for a shared GPU, which sharing "
                         f"{MODE_NAMES[mode]} does not allow (remove it)")
    rejected("several-rules-at-once", pod(container(securityContext={"privileged": True}), labels={QUEUE: "other-team"},
                                          hostPID=True),
             f"[queue-label] label {QUEUE}=other-team names another queue; pods of this tenant use queue "
             f"{mode.tenant} (remove the label)",
             "[privileged] container main is privileged; privileged containers see every GPU of the node "
             "(remove securityContext.privileged)",
             "[host-namespaces] spec.hostPID shares the node's namespaces with the pod (remove spec.hostPID)")

    if mode is TIME_SLICING:
        rejected("two-replicas-in-one-container", pod(container(limits={"nvidia.com/gpu": "2"})),
                 "[per-container-limit] container main requests 2 nvidia.com/gpu; at most 1 per container "
                 "(time-sliced replicas add no compute; the pool fails larger requests)")
        m = pod(*[container(f"c{i}", limits=gpu) for i in range(4)])
        allowed("four-replicas-over-four-containers", m, steered(mode, m))
    if mode is MIG:
        rejected("larger-profile-than-granted", pod(container(limits={"nvidia.com/mig-3g.40gb": "1"})),
                 "[mig-profile] MIG profile 3g.40gb is not granted to the tenant; request nvidia.com/mig-1g.10gb")
        m = pod(container(limits={"nvidia.com/mig-1g.10gb": "7"}))
        allowed("all-seven-instances", m, steered(mode, m))
    if mode is EXCLUSIVE:
        m = pod(container(limits={"nvidia.com/gpu": "2"}))
        allowed("two-whole-gpus", m, steered(mode, m))
    return result


def hami_cases(mode: Mode, allowed, rejected) -> None:
    """HAMi mode's own cases: a share is a `gpu-fraction` of whole 0.25 shares below one GPU; no
    device-plugin or HAMi resource, no `gpu-memory`."""
    wrong_share = ("is not a whole number of the tenant's 0.25 GPU shares within its limit; set gpu-fraction to "
                   "a multiple of 0.25 up to 0.75")
    rejected("more-than-one-gpu-per-pod", pod(annotations={"gpu-fraction": "1"}),
             f"[fraction-annotation] annotation gpu-fraction=1 {wrong_share}")
    rejected("share-not-a-multiple", pod(annotations={"gpu-fraction": "0.3"}),
             f"[fraction-annotation] annotation gpu-fraction=0.3 {wrong_share}")
    for fraction in ("0.5", "0.75"):
        manifest = pod(annotations={"gpu-fraction": fraction})
        allowed(f"kai-gpu-fraction-{fraction}", manifest, steered(mode, manifest))
        shaped = after_kai(manifest, f"kai-shaped-share-{fraction.replace('.', '-')}", mode)
        allowed(f"kai-gpu-fraction-{fraction}-as-kais-admission-leaves-it", shaped, steered(mode, shaped))
    rejected("kai-gpu-memory-annotation", pod(annotations={"gpu-memory": "4096"}),
             "[fraction-annotation] annotation gpu-memory is not granted; ask for a share with annotation "
             'gpu-fraction: "0.25" (its memory is that portion of the GPU)')
    for resource in ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"):
        rejected(f"hami-resource-{resource.removeprefix('nvidia.com/')}", pod(container(limits={resource: "1"})),
                 f"[gpu-resource] {resource} belongs to another sharing mechanism than HAMi; request {mode.granted}")
    # HAMi-core's caps, as the tenant would try to lift or fake them (guard/hami_caps.py)
    rejected("share-raises-its-memory-cap", pod(container(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "81920m"}]),
                                                annotations=SHARE),
             "[hami-caps] container main: CUDA_DEVICE_MEMORY_LIMIT must be exactly '20480m' (the pod's 0.25 share of "
             "a GPU; the guard sets it, remove the tenant's variable)")
    rejected("share-lifts-its-compute-cap", pod(container(env=[{"name": "CUDA_DEVICE_SM_LIMIT", "value": "0"}]),
                                                annotations=SHARE),
             "[hami-caps] container main: CUDA_DEVICE_SM_LIMIT must be exactly '25' (the pod's 0.25 share of a GPU; "
             "the guard sets it, remove the tenant's variable)")
    rejected("share-narrows-visible-devices", pod(container(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]),
                                                  annotations=SHARE),
             "[hami-caps] container main sets CUDA_VISIBLE_DEVICES, with which HAMi-core does not enforce its memory "
             "cap (Project-HAMi/HAMi-core#319); the container sees only its share's GPU (remove the variable)")
    # (its own /overrideEnv would collide with the guard's mount there, which the API server refuses too)
    rejected("share-mounts-over-the-library-directory",
             pod(container(volumeMounts=[{"name": "v", "mountPath": "/usr/local"}]), annotations=SHARE,
                 volumes=[{"name": "v", "emptyDir": {}}]),
             "[hami-preload] container main mounts a volume at /usr/local, which hides or replaces /usr/local/vgpu that "
             "loads or configures GPU isolation (mount it elsewhere)")
    rejected("share-with-a-look-alike-library-init-container",
             pod(container(), annotations=SHARE, initContainers=[container(hami_caps.INIT_CONTAINER)]),
             f"[hami-caps] init container {hami_caps.INIT_CONTAINER}: names starting with gputenant-hami are the "
             "guard's, and only the guard's own init container may use one (rename the container)")
    rejected("share-mounts-the-guards-library-volume-writable-in-a-sidecar",
             pod(container(), container("sidecar", volumeMounts=[{"name": hami_caps.LIBRARY_VOLUME, "mountPath": "/lib2"}]),
                 annotations=SHARE),
             f"[hami-caps] container sidecar mounts the guard's volume {hami_caps.LIBRARY_VOLUME} at /lib2; only the "
             "guard's mounts may (remove the mount)")


ALL_MODES = [TIME_SLICING, HAMI, MIG, EXCLUSIVE]
