"""The pods a hostile tenant sends to the admission guard (issue 12, classes 1-6), as its vCluster
syncer would write them into the host namespace: each either refused, naming the guard's rules, or
stored neutralised. e2e/tests/test_attack_pods.py sends them to the real API server; the ids are
the ones docs/threat-model.md cites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputenant import naming
from gputenant.config.models import OperatorConfig
from gputenant.guard import kai_sharing
from kubeplane import builders
from kubeplane.builders import container
from kubeplane.tools import REPO_ROOT

TENANT_CRD = REPO_ROOT / "crds" / "tenant.yaml"
QUEUE = "kai.scheduler/queue"
POOL = builders.POOL_LABEL


CONFIG = OperatorConfig.model_validate({"pools": builders.sharing_pools()})
TRUSTED, INTERNAL, UNTRUSTED, QUOTA = "atk-ts", "atk-hami", "atk-mig", "atk-quota"
TRUST = {TRUSTED: "Trusted", INTERNAL: "Internal", UNTRUSTED: "Untrusted", QUOTA: "Internal"}
EXTRA_SPEC = {UNTRUSTED: {"sharing": {"mig": {"profile": "1g.10gb"}}}}
GPU = {TRUSTED: "nvidia.com/gpu", UNTRUSTED: "nvidia.com/mig-1g.10gb"}
SHARE = {"gpu-fraction": "0.25"}
"""An Internal (HAMi mode) GPU pod asks for a KAI GPU fraction of one share, not a resource (docs/units.md)."""
POOL_OF = {TRUSTED: "ts", INTERNAL: "hami", UNTRUSTED: "mig"}
SYNCED_CONFIGMAP = f"evil-x-default-x-{INTERNAL}"
"""How vCluster names, in the host namespace, a ConfigMap `evil` the tenant makes in its namespace `default`."""


def named(manifest: dict, name: str) -> dict:
    return {**manifest, "metadata": {**{k: v for k, v in manifest["metadata"].items() if k != "generateName"},
                                     "name": name}}


def guard_prefix(name: str, tenant: str) -> str:
    prefix = kai_sharing.guard_prefix({"metadata": {"name": name, "namespace": namespace(tenant)}})
    assert prefix is not None
    return prefix


def after_kai(manifest: dict, name: str, tenant: str, prefix: str | None = None,
              change: Callable[[dict], Any] | None = None) -> dict:
    """The pod named `name` as KAI v0.12.0's admission webhook leaves it after the guard's mutation (the
    plane runs none): the guard's prefix and KAI's references to it. With `prefix`, the tenant instead
    pre-sets its own prefix and KAI's references to it (the guard's mutation replaces the annotation, the
    references stay the tenant's); then bent by the tenant."""
    shaped = kai_sharing.with_kai_shape(named(manifest, name), prefix or guard_prefix(name, tenant))
    if change:
        change(shaped["spec"]["containers"][0])
    return shaped


def stored_prefix(stored: dict) -> str:
    return stored["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION]


def literal_device_list(first: dict) -> None:
    first["env"] = [v for v in first["env"] if v["name"] != "NVIDIA_VISIBLE_DEVICES"] + [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def device_list_from_a_synced_configmap(first: dict) -> None:
    first["env"] = [v for v in first["env"] if v["name"] != "NVIDIA_VISIBLE_DEVICES"] + [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": SYNCED_CONFIGMAP,
                                                                             "key": "NVIDIA_VISIBLE_DEVICES"}}}]


def env_from_a_synced_configmap(first: dict) -> None:
    first["envFrom"].append({"configMapRef": {"name": SYNCED_CONFIGMAP}})


def namespace(tenant: str) -> str:
    return f"tenant-{tenant}"


def syncer(tenant: str) -> str:
    return f"system:serviceaccount:{namespace(tenant)}:vc-{tenant}"


def pod(*containers: dict, labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    return builders.pod(*containers, labels=labels, annotations=annotations, metadata={"generateName": "attack-"},
                        **spec)


def gpu_pod(tenant: str, **fields) -> dict:
    if tenant in (INTERNAL, QUOTA):
        return pod(container(), **{**fields, "annotations": {**SHARE, **fields.get("annotations", {})}})
    return pod(container(limits={GPU[tenant]: "1"}), **fields)


def env(name: str, value: str = "x") -> dict:
    return {"env": [{"name": name, "value": value}]}


def affinity(key: str, operator: str, values: list[str]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]}}}


@dataclass
class Attack:
    """One thing a tenant tries. `refused`: the rule ids the guard must name; otherwise `stored`
    reads the field the guard neutralised from the stored pod and `expect` is its value."""

    id: str
    threat: int
    """The class of issue 12 it belongs to."""
    tenant: str
    manifest: dict
    refused: tuple[str, ...] = ()
    update: Callable[[dict], Any] | None = None
    """For UPDATE attacks: the patch (a JSON patch list, or a dict the client sends as a merge
    patch) the tenant sends to the stored, admitted `manifest`."""
    ephemeral: dict | None = None
    """An ephemeral container the tenant adds through pods/ephemeralcontainers."""
    stored: Callable[[dict], Any] | None = None
    expect: Any = None
    operation: str = field(init=False)

    def __post_init__(self) -> None:
        self.operation = "CREATE" if self.update is None and self.ephemeral is None else "UPDATE"


def labels_of(stored: dict) -> dict:
    return stored["metadata"].get("labels", {})


def visible_devices(stored: dict) -> list:
    return [v for c in stored["spec"]["containers"] for v in c.get("env", []) if v["name"] == "NVIDIA_VISIBLE_DEVICES"]


ATTACKS = [
    # 1. Every pod is governed, not only GPU pods.
    Attack("cpu-pod-on-kai-is-charged-to-the-tenants-queue", 1, INTERNAL, pod(schedulerName="kai-scheduler"),
           stored=lambda p: labels_of(p).get(QUEUE), expect=INTERNAL),
    Attack("cpu-pod-on-kai-names-another-tenants-queue", 1, INTERNAL,
           pod(schedulerName="kai-scheduler", labels={QUEUE: TRUSTED}), refused=("queue-label",)),
    Attack("cpu-pod-names-kais-default-queue", 1, UNTRUSTED, pod(labels={QUEUE: "default-queue"}),
           refused=("queue-label",)),
    Attack("cpu-pod-selects-a-foreign-pool", 1, TRUSTED, pod(nodeSelector={POOL: "mig"}), refused=("node-selector",)),
    Attack("cpu-pod-tolerates-every-taint", 1, INTERNAL, pod(tolerations=[{"operator": "Exists"}]),
           refused=("toleration",)),
    Attack("cpu-pod-tolerates-every-pool", 1, TRUSTED,
           pod(tolerations=[{"key": POOL, "operator": "Exists", "effect": "NoSchedule"}]), refused=("toleration",)),
    Attack("cpu-pod-sets-node-name", 1, TRUSTED, pod(nodeName="gpu-node-1"), refused=("node-name",)),
    Attack("cpu-pod-picks-the-nvidia-runtime", 1, INTERNAL, pod(runtimeClassName="nvidia"),
           refused=("runtime-class",)),
    Attack("cpu-pod-sees-no-gpu-on-a-gpu-node", 1, UNTRUSTED, pod(),
           stored=visible_devices, expect=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
    Attack("project-label-picks-a-queue", 1, INTERNAL, pod(labels={"project": TRUSTED}), refused=("scheduler-key",)),
    Attack("legacy-runai-queue-label", 1, UNTRUSTED, pod(labels={"runai/queue": TRUSTED}),
           refused=("scheduler-key",)),
    Attack("pod-group-annotation-joins-a-group", 1, INTERNAL, gpu_pod(INTERNAL, annotations={"pod-group-name": "pg-x"}),
           refused=("scheduler-key",)),
    Attack("skip-podgrouper-annotation", 1, TRUSTED, pod(annotations={"kai.scheduler/skip-podgrouper": "true"}),
           refused=("scheduler-key",)),
    Attack("priority-label-for-kai", 1, INTERNAL, gpu_pod(INTERNAL, labels={"priorityClassName": "inference"}),
           refused=("scheduler-key",)),
    Attack("non-preemptible-label-for-kai", 1, UNTRUSTED,
           gpu_pod(UNTRUSTED, labels={"kai.scheduler/preemptibility": "non-preemptible"}), refused=("scheduler-key",)),
    Attack("system-priority-class", 1, TRUSTED, pod(priorityClassName="system-node-critical"),
           refused=("priority-class",)),
    # 1b. KAI's whole vocabulary (docs/threat-model.md), and pod affinity to other tenants' pods.
    Attack("multi-gpu-group-label-keeps-a-reservation", 1, INTERNAL,
           gpu_pod(INTERNAL, labels={"runai-gpu-group/gpu-of-atk-ts": "gpu-of-atk-ts"}), refused=("scheduler-key",)),
    Attack("spark-labels-join-another-tenants-gang", 1, INTERNAL, gpu_pod(INTERNAL, labels={
        "spark-app-name": "job", "spark-app-selector": f"gang.{TRUSTED}.0b1c2d3e-0000-4000-8000-000000000000"}),
           refused=("scheduler-key",)),
    Attack("app-label-poses-as-kais-reservation", 1, TRUSTED, gpu_pod(TRUSTED, labels={"app": "kai-resource-reservation"}),
           refused=("scheduler-key",)),
    Attack("user-annotation-for-kai", 1, UNTRUSTED, gpu_pod(UNTRUSTED, annotations={"user": "someone-else"}),
           refused=("scheduler-key",)),
    Attack("pod-affinity-to-another-tenants-pods", 1, INTERNAL, pod(affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "inference"}}, "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {naming.TENANT_LABEL: TRUSTED}}}]}}),
           refused=("pod-affinity-namespace",)),
    Attack("pod-anti-affinity-names-another-tenants-namespace", 1, UNTRUSTED, gpu_pod(UNTRUSTED, affinity={
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {}, "topologyKey": "kubernetes.io/hostname", "namespaces": [namespace(TRUSTED)]}}]}}),
           refused=("pod-affinity-namespace",)),
    Attack("affinity-to-a-foreign-pool", 1, INTERNAL, pod(affinity=affinity(POOL, "In", ["mig"])),
           refused=("node-affinity",)),
    Attack("affinity-away-from-the-own-pool", 1, UNTRUSTED, gpu_pod(UNTRUSTED, affinity=affinity(POOL, "NotIn", ["mig"])),
           refused=("node-affinity",)),
    Attack("foreign-scheduler-for-a-cpu-pod", 1, UNTRUSTED, pod(schedulerName="my-scheduler"),
           refused=("scheduler-name",)),
    Attack("another-vendors-device", 1, INTERNAL, pod(container(limits={"amd.com/gpu": "1"})),
           refused=("resource-name",)),
    Attack("dra-device-class-resource", 1, UNTRUSTED,
           pod(container(limits={"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "1"})),
           refused=("resource-name",)),
    # 3. Updates and subresources.
    Attack("update-adds-a-project-label", 3, INTERNAL, gpu_pod(INTERNAL),
           update=lambda _: {"metadata": {"labels": {"project": TRUSTED}}}, refused=("scheduler-key",)),
    Attack("update-moves-the-pod-to-another-queue", 3, UNTRUSTED, gpu_pod(UNTRUSTED),
           update=lambda _: {"metadata": {"labels": {QUEUE: "default-queue"}}}, refused=("queue-label",)),
    Attack("update-removes-the-queue-label", 3, INTERNAL, gpu_pod(INTERNAL),
           update=lambda _: [{"op": "remove", "path": "/metadata/labels/kai.scheduler~1queue"}],
           stored=lambda p: labels_of(p).get(QUEUE), expect=INTERNAL),
    Attack("update-adds-a-pod-group-annotation", 3, TRUSTED, gpu_pod(TRUSTED),
           update=lambda _: {"metadata": {"annotations": {"pod-group-name": "pg-other"}}},
           refused=("scheduler-key",)),
    Attack("update-adds-a-hami-annotation", 3, INTERNAL, gpu_pod(INTERNAL),
           update=lambda _: {"metadata": {"annotations": {"hami.io/vgpu-node": "gpu-node-1"}}},
           refused=("scheduler-key",)),
    Attack("update-tolerates-every-taint", 3, INTERNAL, gpu_pod(INTERNAL),
           update=lambda _: [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}],
           refused=("toleration",)),
    Attack("gated-pod-retargeted-to-a-foreign-pool", 3, TRUSTED, pod(schedulingGates=[{"name": "example.com/hold"}]),
           update=lambda _: {"spec": {"nodeSelector": {POOL: "mig"}}}, refused=("node-selector",)),
    Attack("privileged-debug-container", 3, UNTRUSTED, gpu_pod(UNTRUSTED),
           ephemeral=container("debug", securityContext={"privileged": True}), refused=("privileged",)),
    Attack("debug-container-switches-hami-off", 3, INTERNAL, gpu_pod(INTERNAL),
           ephemeral=container("debug", **env("CUDA_DISABLE_CONTROL", "true")), refused=("isolation-env",)),
    Attack("debug-container-sees-every-gpu", 3, TRUSTED, gpu_pod(TRUSTED),
           ephemeral=container("debug", **env("NVIDIA_VISIBLE_DEVICES", "all")), refused=("device-env",)),
    Attack("debug-container-with-a-cuda-image-sees-no-gpu", 3, UNTRUSTED, gpu_pod(UNTRUSTED),
           ephemeral=container("debug", image="nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"),
           stored=lambda p: p["spec"]["ephemeralContainers"][0].get("env"),
           expect=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
    Attack("debug-container-takes-a-configmaps-variables", 3, INTERNAL, gpu_pod(INTERNAL),
           ephemeral=container("debug", envFrom=[{"configMapRef": {"name": "knobs"}}]), refused=("env-from",)),
    # 4. HAMi switches.
    Attack("env-from-without-prefix", 4, INTERNAL, pod(container(envFrom=[{"configMapRef": {"name": "knobs"}}]),
                                                       annotations=SHARE),
           refused=("env-from",)),
    Attack("env-from-with-a-cuda-prefix", 4, UNTRUSTED, pod(container(envFrom=[
        {"prefix": "CUDA_", "secretRef": {"name": "knobs"}}])), refused=("env-from",)),
    Attack("env-from-with-a-prefix-that-completes-a-variable", 4, INTERNAL, pod(container(envFrom=[
        {"prefix": "CUDA_DEVICE_", "configMapRef": {"name": "knobs"}}])), refused=("env-from",)),
    Attack("env-from-nvidia-prefix-on-trusted", 4, TRUSTED, pod(container(envFrom=[
        {"prefix": "NVIDIA_", "configMapRef": {"name": "knobs"}}])), refused=("env-from",)),
    Attack("memory-limit-from-a-secret", 4, INTERNAL, pod(container(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT",
        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])), refused=("isolation-env",)),
    Attack("preload-shadows-hami-core", 4, INTERNAL, pod(container(**env("LD_PRELOAD", "/opt/nolimit.so"))),
           refused=("isolation-env",)),
    Attack("oom-killer-off", 4, UNTRUSTED, pod(container(**env("ACTIVE_OOM_KILLER", "false"))),
           refused=("isolation-env",)),
    Attack("task-priority", 4, INTERNAL, pod(container(**env("CUDA_TASK_PRIORITY", "0"))), refused=("isolation-env",)),
    Attack("core-policy-in-an-init-container", 4, INTERNAL, pod(container(), initContainers=[
        container("setup", **env("GPU_CORE_UTILIZATION_POLICY", "disable"))]), refused=("isolation-env",)),
    Attack("driver-capabilities", 4, TRUSTED, pod(container(**env("NVIDIA_DRIVER_CAPABILITIES", "all"))),
           refused=("device-env",)),
    Attack("tenant-sets-hami-allocation-annotation", 4, INTERNAL,
           gpu_pod(INTERNAL, annotations={"hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,81920,100"}),
           refused=("scheduler-key",)),
    Attack("tenant-picks-hami-mode", 4, INTERNAL, gpu_pod(INTERNAL, annotations={"nvidia.com/vgpu-mode": "mig"}),
           refused=("scheduler-key",)),
    Attack("volume-hides-ld-so-preload", 4, INTERNAL, pod(container(volumeMounts=[
        {"name": "etc", "mountPath": "/etc"}]), volumes=[{"name": "etc", "emptyDir": {}}]), refused=("hami-preload",)),
    Attack("memory-percentage-escapes-the-quota", 4, INTERNAL,
           pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"})),
           refused=("gpu-resource",)),
    Attack("vgpu-slot-instead-of-a-share", 4, INTERNAL, pod(container(limits={"nvidia.com/gpu": "1"})),
           refused=("gpu-resource",)),
    Attack("hami-caps-instead-of-a-share", 4, INTERNAL,
           pod(container(limits={"nvidia.com/gpumem": "81920", "nvidia.com/gpucores": "100"})),
           refused=("gpu-resource",)),
    Attack("share-of-a-whole-gpu", 4, INTERNAL, gpu_pod(INTERNAL, annotations={"gpu-fraction": "1"}),
           refused=("fraction-annotation",)),
    Attack("share-not-a-multiple-of-the-tenants", 4, INTERNAL, gpu_pod(INTERNAL, annotations={"gpu-fraction": "0.6"}),
           refused=("fraction-annotation",)),
    Attack("share-sized-by-memory", 4, INTERNAL, pod(annotations={"gpu-memory": "81920"}),
           refused=("fraction-annotation",)),
    # (the stored HAMi-core caps are the old share's, so hami-caps refuses the new one too)
    Attack("share-grows-on-update", 3, INTERNAL, gpu_pod(INTERNAL),
           update=lambda _: {"metadata": {"annotations": {"gpu-fraction": "0.75"}}},
           refused=("fraction-annotation", "hami-caps")),
    # The guard replaces a prefix the tenant pre-set; the KAI-shaped references it hung on its own prefix
    # then name ConfigMaps that are not the pod's.
    Attack("kai-configmap-named-after-a-synced-configmap", 4, INTERNAL,
           after_kai(gpu_pod(INTERNAL), "kai-synced", INTERNAL, prefix=SYNCED_CONFIGMAP),
           refused=("device-env", "isolation-env", "env-from")),
    Attack("kai-configmap-of-another-pod", 4, TRUSTED,
           after_kai(gpu_pod(TRUSTED, annotations={"gpu-fraction": "0.5"}), "kai-thief", TRUSTED,
                     prefix=guard_prefix("victim", TRUSTED)), refused=("device-env", "env-from")),
    Attack("kai-prefix-pre-set-in-kais-form", 4, INTERNAL,
           named(gpu_pod(INTERNAL, annotations={kai_sharing.CONFIGMAP_ANNOTATION: "kai-preset-b2x9kzq-shared-gpu"}),
                 "kai-preset"),
           stored=stored_prefix, expect=guard_prefix("kai-preset", INTERNAL)),
    Attack("kai-shape-with-a-literal-device-list", 4, INTERNAL,
           after_kai(gpu_pod(INTERNAL), "kai-literal", INTERNAL, change=literal_device_list), refused=("device-env",)),
    Attack("kai-shape-with-devices-from-a-synced-configmap", 4, INTERNAL,
           after_kai(gpu_pod(INTERNAL), "kai-devices", INTERNAL, change=device_list_from_a_synced_configmap),
           refused=("device-env",)),
    Attack("kai-shape-plus-env-from-a-synced-configmap", 4, INTERNAL,
           after_kai(gpu_pod(INTERNAL), "kai-env-from", INTERNAL, change=env_from_a_synced_configmap),
           refused=("env-from",)),
    Attack("kai-configmap-annotation-without-a-share", 4, INTERNAL,
           pod(annotations={kai_sharing.CONFIGMAP_ANNOTATION: "attack-b2x9kzq-shared-gpu"}), refused=("kai-sharing",)),
    Attack("update-repoints-kais-configmaps", 3, INTERNAL, after_kai(gpu_pod(INTERNAL), "kai-repointed", INTERNAL),
           update=lambda _: {"metadata": {"annotations": {kai_sharing.CONFIGMAP_ANNOTATION:
                                                          "kai-repointed-ccccccc-shared-gpu"}}},
           refused=("kai-sharing", "device-env", "isolation-env", "env-from")),
    Attack("isolator-opt-out-annotation", 4, INTERNAL,
           gpu_pod(INTERNAL, annotations={"kai-resource-isolator.io/inject": "false"}), refused=("scheduler-key",)),
    Attack("fraction-pod-sidecar-sees-every-gpu", 4, INTERNAL,
           pod(container(), container("sidecar-of-a-cuda-image"), annotations=SHARE),
           stored=lambda p: [v["value"] for v in visible_devices(p)], expect=["void"]),
    Attack("share-is-steered-to-the-pool", 4, INTERNAL, gpu_pod(INTERNAL),
           stored=lambda p: (p["spec"]["schedulerName"], p["spec"]["nodeSelector"], labels_of(p).get(QUEUE)),
           expect=("kai-scheduler", {POOL: "hami"}, INTERNAL)),
    # 5. Pools: a tenant cannot reach a pool of another trust.
    Attack("trusted-gpu-pod-selects-the-customers-mig-pool", 5, TRUSTED, gpu_pod(TRUSTED, nodeSelector={POOL: "mig"}),
           refused=("node-selector",)),
    Attack("trusted-pod-tolerates-the-mig-pool", 5, TRUSTED, gpu_pod(TRUSTED, tolerations=[
        {"key": POOL, "operator": "Equal", "value": "mig", "effect": "NoSchedule"}]), refused=("toleration",)),
    Attack("trusted-pod-asks-for-a-mig-instance", 5, TRUSTED, pod(container(limits={"nvidia.com/mig-1g.10gb": "1"})),
           refused=("gpu-resource",)),
    Attack("internal-pod-prefers-the-time-sliced-pool", 5, INTERNAL, gpu_pod(INTERNAL, affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [
            {"key": POOL, "operator": "In", "values": ["ts"]}]}}]}}), refused=("node-affinity",)),
]
