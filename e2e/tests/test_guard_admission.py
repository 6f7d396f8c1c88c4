"""The admission guard in front of the real apiserver: its webhook server runs on loopback with TLS
(generated certificates), registered by its own webhook configurations; GpuTenants are real objects
of the generated CRD; every pod is created by the tenant's own identity (a client-certificate user
bound to `edit` in the host namespace) and the outcome is read back from the apiserver.

The host namespaces carry the labels the renderer gives them except the Pod Security level: Pod
Security is a separate layer (restricted for Untrusted) whose messages would stand in front of the
guard's for privileged and host-namespace pods; these tests pin down the guard's own answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.config.models import OperatorConfig
from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.standalone import GuardThread
from kubeplane import wait_for
from kubeplane.builders import POOL_LABEL, container, pod, sharing_pools
from kubeplane.builders import placed_pool as pool
from kubeplane.fixtures import guard_serves, install_crds, remove_tenants
from kubeplane.operator_process import remove_guard_configurations
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


def test_every_mode_has_at_least_25_cases():
    assert {MODE_NAMES[m]: len(cases(m)) >= 25 for m in ALL_MODES} == {name: True for name in MODE_NAMES.values()}


# -- the guarded plane -------------------------------------------------------------------------


def tenant_object(mode: Mode) -> dict:
    spec = {"trust": mode.trust, "owners": [{"kind": "User", "name": f"{mode.tenant}-owner"}],
            "gpu": {"quota": 1, "limit": 1}}
    for key, value in mode.extra_spec.items():
        spec[key] = {**spec.get(key, {}), **value}
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": mode.tenant}, "spec": spec}


@dataclass
class Guarded:
    plane: object
    guard: GuardThread
    users: dict[str, Path]

    def create(self, mode: Mode, manifest: dict) -> dict:
        with self.plane.api_client(self.users[mode.tenant]) as client:
            created = kubernetes.client.CoreV1Api(client).create_namespaced_pod(mode.namespace, manifest)
            return client.sanitize_for_serialization(created)


@pytest.fixture(scope="module")
def guarded(plane, tmp_path_factory):
    if not TENANT_CRD.is_file():
        pytest.skip("crds/tenant.yaml is missing: generate it with `gputenant crd`")
    install_crds(plane, TENANT_CRD)
    users = {}
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for mode in ALL_MODES:
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", tenant_object(mode))
            plane.create_namespace(mode.namespace, labels={
                **naming.tenant_labels(mode.tenant, "namespace"), naming.TRUST_LABEL: mode.trust})
            user = f"{mode.tenant}-dev"
            users[mode.tenant] = plane.user(user)
            rbac.create_namespaced_role_binding(mode.namespace, {
                "metadata": {"name": "tenant-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path_factory.mktemp("guard-certs")).start()
    try:
        for mode in ALL_MODES:
            wait_for(lambda mode=mode: guard_serves(plane, mode.namespace), timeout=60, what=f"the guard to serve {mode.namespace}")
        yield Guarded(plane, guard, users)
    finally:
        guard.stop()
        remove_guard_configurations(plane)
        remove_tenants(plane, {mode.tenant: mode.namespace for mode in ALL_MODES})


def admitted_view(stored: dict) -> Admitted:
    spec = stored["spec"]
    return Admitted(
        labels=stored["metadata"].get("labels", {}), scheduler=spec["schedulerName"],
        node_selector=spec.get("nodeSelector", {}),
        # DefaultTolerationSeconds adds node.kubernetes.io/* tolerations to every pod; not the guard's.
        tolerations=[t for t in spec.get("tolerations", []) if not t["key"].startswith("node.kubernetes.io/")],
        limits=[(c.get("resources") or {}).get("limits", {}) for c in spec.get("initContainers", []) + spec["containers"]],
        caps=caps_view(spec))


@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: MODE_NAMES[m])
def test_pod_table(guarded, mode):
    """Every case of the mode, created as the tenant; all mismatches reported together."""
    mismatches = []
    for case in cases(mode):
        try:
            stored = guarded.create(mode, case.manifest)
        except ApiException as error:
            message = json.loads(error.body)["message"] if error.body else str(error)
            if case.message != message:
                mismatches.append(f"{case.id}: rejected with {message!r}, expected "
                                  f"{'admission' if case.admitted else repr(case.message)}")
            continue
        if case.admitted is None:
            mismatches.append(f"{case.id}: admitted, expected rejection {case.message!r}")
        elif admitted_view(stored) != case.admitted:
            mismatches.append(f"{case.id}: stored {admitted_view(stored)}, expected {case.admitted}")
    assert mismatches == []


def test_a_tenant_cannot_use_another_tenants_queue_or_pool(guarded):
    manifest = pod(container(limits={"nvidia.com/gpu": "1"}), labels={QUEUE: MIG.tenant},
                   nodeSelector={POOL_KEY: MIG.pool})
    with pytest.raises(ApiException) as refused:
        guarded.create(TIME_SLICING, manifest)
    assert json.loads(refused.value.body)["message"] == denied(
        TIME_SLICING,
        f"[queue-label] label {QUEUE}=mig-team names another queue; pods of this tenant use queue ts-team (remove the label)",
        f"[node-selector] nodeSelector {POOL_KEY}=mig leaves the tenant's pool; it must be {POOL_KEY}=ts (remove it)")


def test_pod_outside_tenant_namespaces_passes_untouched(guarded):
    """Not even sent to the guard: the namespace selector leaves it out, so a privileged GPU pod
    with a foreign queue is stored exactly as written."""
    guarded.plane.create_namespace("no-tenant")
    manifest = pod(container(limits={"nvidia.com/gpu": "3"}, securityContext={"privileged": True}),
                   labels={QUEUE: "ts-team"}, hostPID=True)
    with guarded.plane.api_client() as client:
        stored = client.sanitize_for_serialization(
            kubernetes.client.CoreV1Api(client).create_namespaced_pod("no-tenant", manifest))
    assert admitted_view(stored) == untouched(manifest)
    assert stored["spec"]["hostPID"] is True


def test_webhook_configurations_select_only_tenant_namespaces_and_fail_closed(guarded):
    with guarded.plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        mutating = client.sanitize_for_serialization(admission.read_mutating_webhook_configuration("gputenant-guard"))
        validating = client.sanitize_for_serialization(admission.read_validating_webhook_configuration("gputenant-guard"))
    selector = {"matchExpressions": [
        {"key": "gputenant.io/tenant", "operator": "Exists"},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["gpu-tenant-operator", "kube-node-lease", "kube-public", "kube-system"]}]}
    pod_hooks = [mutating["webhooks"][0], validating["webhooks"][0]]
    assert [(h["name"], h["failurePolicy"], h["namespaceSelector"]) for h in pod_hooks] == [
        ("pods.mutate.gputenant.io", "Fail", selector), ("pods.validate.gputenant.io", "Fail", selector)]
    assert all(h["clientConfig"]["url"].startswith("https://127.0.0.1:") for h in pod_hooks)


def test_tenant_update_withdrawing_a_mig_profile_in_use_is_refused(guarded):
    stored = guarded.create(MIG, pod(container(limits={"nvidia.com/mig-1g.10gb": "1"})))
    name = stored["metadata"]["name"]
    with guarded.plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        with pytest.raises(ApiException) as refused:
            custom.patch_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", MIG.tenant,
                                               {"spec": {"sharing": {"mig": {"profile": "2g.20gb"}}}})
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "gputenants.validate.gputenant.io" denied the request: '
                              "[gpu-resource-in-use] the change withdraws what running pods of tenant mig-team use: "
                              "MIG profile 1g.10gb is used by ")
    assert f"{MIG.namespace}/{name}" in message
    assert message.endswith("; delete those pods first, then change the tenant")


def test_tenant_quota_above_what_the_pool_can_still_give_is_refused(guarded):
    with guarded.plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        with pytest.raises(ApiException) as refused:
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", {
                "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": "greedy"},
                "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "g"}], "gpu": {"quota": 8, "limit": 8}}})
    assert json.loads(refused.value.body)["message"] == (
        'admission webhook "gputenants.validate.gputenant.io" denied the request: [pool-capacity] gpu.quota 8 of '
        "tenant greedy does not fit pool ts: it has 8 GPUs and 1 are guaranteed to other tenants (ts-team: 1); "
        "lower gpu.quota to at most 7 or choose another pool with gpu.pool")



def test_updates_keep_the_queue_label_and_ephemeral_containers_are_checked(guarded):
    stored = guarded.create(HAMI, pod(annotations=SHARE))
    name = stored["metadata"]["name"]
    with guarded.plane.api_client(guarded.users[HAMI.tenant]) as client:
        core = kubernetes.client.CoreV1Api(client)
        relabelled = core.patch_namespaced_pod(name, HAMI.namespace, [
            {"op": "remove", "path": "/metadata/labels/kai.scheduler~1queue"},
            {"op": "add", "path": "/metadata/labels/stage", "value": "eval"}])
        assert relabelled.metadata.labels == {QUEUE: HAMI.tenant, "stage": "eval"}
        with pytest.raises(ApiException) as foreign:
            core.patch_namespaced_pod(name, HAMI.namespace, {"metadata": {"labels": {QUEUE: "ts-team"}}})
    assert json.loads(foreign.value.body)["message"] == denied(
        HAMI, f"[queue-label] label {QUEUE}=ts-team names another queue; pods of this tenant use queue hami-team "
              "(remove the label)")
    with guarded.plane.api_client() as client:
        with pytest.raises(ApiException) as debug:
            kubernetes.client.CoreV1Api(client).patch_namespaced_pod_ephemeralcontainers(name, HAMI.namespace, {
                "spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox",
                                                  "securityContext": {"privileged": True}}]}})
    assert json.loads(debug.value.body)["message"] == denied(
        HAMI, "[privileged] ephemeral container debug is privileged; privileged containers see every GPU of the "
              "node (remove securityContext.privileged)")
