"""A hostile tenant against the admission guard, on the real apiserver (issue 12, classes 1-6).

The tenant is cluster-admin of its vCluster, so its pods reach the host namespace shaped however it
likes, written by the vCluster syncer's ServiceAccount. Every attack below is sent as that
ServiceAccount (a client certificate whose user is ``system:serviceaccount:<ns>:vc-<tenant>``,
bound to ``edit`` there), on CREATE or UPDATE, and each is either refused (the rule ids in the
message are asserted) or neutralised (the stored object is read back). GPU nodes are not part of the
plane: what a pod would do on one is argued in docs/threat-model.md, which names these tests.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard import kai_sharing
from gputenant.guard.gang_groups import GangGroups
from gputenant.guard.gangs import POD_GROUP_ANNOTATION, VIRTUAL_OWNERS_ANNOTATION
from gputenant.guard.keys import GANG_SIZE_ANNOTATION
from gputenant.guard.standalone import GuardThread
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.render.tenant import POD_GROUPS_QUOTA, render_tenant
from kubeplane import builders, wait_for
from kubeplane.builders import container
from kubeplane.fixtures import UPSTREAM_PODGROUP_CRD, guard_serves, install_crds, remove_tenants
from kubeplane.operator_process import remove_guard_configurations
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


def test_at_least_45_attacks_over_classes_1_to_6():
    assert len(ATTACKS) >= 45 and {a.threat for a in ATTACKS} >= {1, 3, 4, 5}
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)


# -- the guarded plane -------------------------------------------------------------------------


def tenant_object(name: str) -> dict:
    spec = {"trust": TRUST[name], "owners": [{"kind": "User", "name": f"{name}-owner"}], "gpu": {"quota": 1, "limit": 1},
            **EXTRA_SPEC.get(name, {})}
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name}, "spec": spec}


@dataclass
class Plane:
    plane: Any
    identities: dict[str, Path]

    def api(self, identity: str) -> kubernetes.client.ApiClient:
        return self.plane.api_client(self.identities[identity])

    def as_syncer(self, tenant: str) -> kubernetes.client.ApiClient:
        return self.api(syncer(tenant))


@pytest.fixture(scope="module")
def attacked(plane, tmp_path_factory):
    if not TENANT_CRD.is_file():
        pytest.skip("crds/tenant.yaml is missing: generate it with `gputenant crd`")
    install_crds(plane, TENANT_CRD)
    # The GPU Operator installs this RuntimeClass on every GPU cluster; without it the API server's
    # RuntimeClass plugin would refuse the attack before the guard sees it.
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}))
    identities = {}
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for name in TRUST:
            body = tenant_object(name)
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", body)
            rendered = render_tenant(GpuTenant.model_validate(body), decide(name, GpuTenant.model_validate(body).spec,
                                                                            CONFIG), CONFIG)
            labels = next(o for o in rendered.objects if o["kind"] == "Namespace")["metadata"]["labels"]
            labels = {k: v for k, v in labels.items() if not k.startswith("pod-security.")}
            plane.create_namespace(namespace(name), labels=labels)
            if name == QUOTA:
                for kind in ("ResourceQuota", "LimitRange"):
                    document = next(o for o in rendered.objects if o["kind"] == kind)
                    plane.kubectl("apply", "-f", "-", input=json.dumps(document))
            rbac.create_namespaced_role(namespace(name), {
                "metadata": {"name": "syncer"},
                "rules": [{"apiGroups": [""], "resources": ["pods", "pods/ephemeralcontainers"], "verbs": ["*"]}]})
            rbac.create_namespaced_role_binding(namespace(name), {
                "metadata": {"name": "syncer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
                "subjects": [{"kind": "ServiceAccount", "name": f"vc-{name}", "namespace": namespace(name)}]})
            identities[syncer(name)] = plane.user(syncer(name), ["system:serviceaccounts",
                                                                 f"system:serviceaccounts:{namespace(name)}"])
    # The plane's API server presents a webhook client certificate and the guard requires it, as in
    # production with --webhook-client-ca: every attack also proves the API server gets through.
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path_factory.mktemp("attack-guard-certs"),
                        client_ca_file=plane.webhook_client_ca_path).start()
    try:
        for name in TRUST:
            wait_for(lambda name=name: guard_serves(plane, namespace(name)), timeout=60, what=f"the guard to serve {namespace(name)}")
        yield Plane(plane, identities)
    finally:
        guard.stop()
        remove_guard_configurations(plane)
        remove_tenants(plane, {name: namespace(name) for name in TRUST})


def rules_named(error: ApiException) -> set[str]:
    message = json.loads(error.body)["message"] if error.body else str(error)
    return set(re.findall(r"\[([a-z-]+)\]", message))


def carry_out(attacked: Plane, attack: Attack) -> dict:
    """Send the attack as the tenant's syncer; returns the stored pod (raises ApiException if refused)."""
    ns = namespace(attack.tenant)
    with attacked.as_syncer(attack.tenant) as client:
        core = kubernetes.client.CoreV1Api(client)
        created = client.sanitize_for_serialization(core.create_namespaced_pod(ns, attack.manifest))
        if attack.operation == "CREATE":
            return created
        name = created["metadata"]["name"]
        if attack.ephemeral is not None:
            result = core.patch_namespaced_pod_ephemeralcontainers(
                name, ns, {"spec": {"ephemeralContainers": [attack.ephemeral]}})
        else:
            result = core.patch_namespaced_pod(name, ns, attack.update(created))
        return client.sanitize_for_serialization(result)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: f"{a.threat}-{a.operation.lower()}-{a.id}")
def test_attack_is_refused_or_neutralised(attacked, attack):
    if attack.refused:
        with pytest.raises(ApiException) as refused:
            carry_out(attacked, attack)
        assert rules_named(refused.value) == set(attack.refused), json.loads(refused.value.body or "{}").get("message")
    else:
        assert attack.stored(carry_out(attacked, attack)) == attack.expect


# -- 2. identity -------------------------------------------------------------------------------


def test_a_namespace_labelled_as_a_tenants_is_not_that_tenant(attacked):
    """Someone with namespace rights labels a namespace as tenant atk-ts's (Trusted, the weakest rules):
    it is not the namespace the operator recorded for atk-ts, so its pods are refused outright."""
    impostor = "impostor-of-atk-ts"
    attacked.plane.create_namespace(impostor, labels=naming.tenant_labels(TRUSTED, "namespace"))
    try:
        with attacked.plane.api_client() as client:
            with pytest.raises(ApiException) as refused:
                kubernetes.client.CoreV1Api(client).create_namespaced_pod(impostor, pod())
        assert json.loads(refused.value.body)["message"].endswith(
            f"namespace {impostor} is labelled gputenant.io/tenant but is not the host namespace of any GpuTenant "
            "the admission guard knows; pods here are refused (if the tenant was just created, retry in a few seconds)")
    finally:
        with attacked.plane.api_client() as client:
            kubernetes.client.CoreV1Api(client).delete_namespace(impostor)


def test_a_tenant_recreated_under_the_same_name_is_judged_by_its_new_trust(attacked):
    """Deleted and re-created at generation 1 again with a lower trust: the guard's decision cache
    is keyed by uid, so the old Trusted decision does not leak into the Internal tenant."""
    knob = pod(container(**env("CUDA_DISABLE_CONTROL", "true")))
    ns = namespace(TRUSTED)
    with attacked.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        assert core.create_namespaced_pod(ns, knob, dry_run="All").metadata.namespace == ns
        custom.delete_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", TRUSTED)
        lowered = tenant_object(TRUSTED)
        lowered["spec"]["trust"] = "Internal"
        custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", lowered)

        def refused_now() -> bool:
            try:
                core.create_namespaced_pod(ns, knob, dry_run="All")
            except ApiException as error:
                return "[isolation-env]" in (error.body or "")
            return False
        try:
            wait_for(refused_now, timeout=30, what="the re-created tenant's Internal rules")
        finally:
            custom.delete_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", TRUSTED)
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", tenant_object(TRUSTED))


def test_two_pods_pre_set_one_prefix(attacked):
    """Two fraction pods whose host names share their first 33 characters (all KAI keeps of them) and one
    pre-set prefix in KAI's form: KAI's binder would write both GPUs into one ConfigMap. The guard gives
    each stored pod its own prefix."""
    names = [f"{'twin' * 9}-{n}" for n in range(2)]
    preset = f"{names[0][:33]}-b2x9kzq-shared-gpu"
    with attacked.as_syncer(INTERNAL) as client:
        core = kubernetes.client.CoreV1Api(client)
        stored = [client.sanitize_for_serialization(core.create_namespaced_pod(namespace(INTERNAL), named(
            gpu_pod(INTERNAL, annotations={kai_sharing.CONFIGMAP_ANNOTATION: preset}), name))) for name in names]
    prefixes = [stored_prefix(p) for p in stored]
    assert prefixes == [guard_prefix(name, INTERNAL) for name in names]
    assert len(set(prefixes)) == 2 and preset not in prefixes


def test_kai_may_still_group_a_pod_the_tenant_may_not(attacked):
    """The platform side of an UPDATE: KAI's pod-grouper writes pod-group-name onto a tenant pod
    (refused from the tenant's syncer, see update-adds-a-pod-group-annotation)."""
    kai = "system:serviceaccount:kai-scheduler:podgrouper"
    ns = namespace(INTERNAL)
    identity = attacked.plane.user(kai, ["system:serviceaccounts"])
    with attacked.plane.api_client() as client:
        kubernetes.client.RbacAuthorizationV1Api(client).create_namespaced_role_binding(ns, {
            "metadata": {"name": "podgrouper"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
            "subjects": [{"kind": "ServiceAccount", "name": "podgrouper", "namespace": "kai-scheduler"}]})
    with attacked.as_syncer(INTERNAL) as client:
        name = kubernetes.client.CoreV1Api(client).create_namespaced_pod(ns, gpu_pod(INTERNAL)).metadata.name
    with attacked.plane.api_client(identity) as client:
        grouped = kubernetes.client.CoreV1Api(client).patch_namespaced_pod(
            name, ns, {"metadata": {"annotations": {"pod-group-name": f"pg-{name}"}}})
    assert grouped.metadata.annotations["pod-group-name"] == f"pg-{name}"


# -- 4. HAMi shares, and what admission cannot see ---------------------------------------------


def test_shares_are_counted_by_the_queue_and_whole_gpus_by_nobody(attacked):
    """atk-quota (Internal, gpu.limit 1) holds 4 quarter shares. A KAI fraction carries no resource the
    API server can count (KAI's reservation pod holds the GPU), so a fifth share is admitted and waits
    in KAI's queue (e2e/tests/test_hami_kai.py shows the queue hold it); the ResourceQuota grants no
    whole GPU, behind the guard's own refusal."""
    ns = namespace(QUOTA)
    with attacked.as_syncer(QUOTA) as client:
        core = kubernetes.client.CoreV1Api(client)
        admitted = [core.create_namespaced_pod(ns, gpu_pod(QUOTA)) for _ in range(5)]
    assert [p.metadata.annotations["gpu-fraction"] for p in admitted] == ["0.25"] * 5
    with attacked.plane.api_client() as client:
        quota = kubernetes.client.CoreV1Api(client).read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, ns)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "0"
    assert not {key for key in quota.spec.hard if "gpumem" in key or "gpucores" in key}


def test_a_process_that_unsets_its_own_limits_is_admitted_as_documented(attacked):
    """No admission check reads a container's command: a tenant whose program unsets HAMi's variables
    (or calls the driver directly) is admitted. docs/trust-levels.md states this limit."""
    sneaky = gpu_pod(INTERNAL)
    sneaky["spec"]["containers"][0]["command"] = ["sh", "-c", "unset CUDA_DEVICE_MEMORY_LIMIT; exec python train.py"]
    with attacked.as_syncer(INTERNAL) as client:
        stored = kubernetes.client.CoreV1Api(client).create_namespaced_pod(namespace(INTERNAL), sneaky)
    assert stored.spec.containers[0].command[2].startswith("unset CUDA_DEVICE_MEMORY_LIMIT")
    assert "a process that unsets a variable itself" in (REPO_ROOT / "docs" / "trust-levels.md").read_text()


# -- gangs: admission writes nothing; the operator writes the PodGroup, owned by its members ------


def gang_pod(tenant: str, size: int = 2, **fields) -> dict:
    """A GPU pod of a virtual Job asking for a gang, as vCluster syncs it (the virtual owner recorded)."""
    owners = json.dumps([{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": str(uuid.uuid4()),
                          "controller": True}])
    manifest = gpu_pod(tenant, **fields)
    manifest["metadata"].setdefault("annotations", {}).update(
        {GANG_SIZE_ANNOTATION: str(size), VIRTUAL_OWNERS_ANNOTATION: owners})
    return manifest


def pod_groups(plane, ns: str) -> list[dict]:
    with plane.api_client() as client:
        return kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]


def test_a_refused_gang_pod_leaves_no_pod_group(attacked):
    """Before admission decided, the mutating webhook wrote the gang's PodGroup: every refused pod left one
    behind, uncounted. Now admission writes nothing."""
    install_crds(attacked.plane, UPSTREAM_PODGROUP_CRD)
    ns = namespace(UNTRUSTED)
    with attacked.as_syncer(UNTRUSTED) as client, pytest.raises(ApiException) as refused:
        kubernetes.client.CoreV1Api(client).create_namespaced_pod(ns, gang_pod(UNTRUSTED, labels={"project": TRUSTED}))
    assert rules_named(refused.value) == {"scheduler-key"}
    assert pod_groups(attacked.plane, ns) == []


def test_the_operator_writes_a_gangs_pod_group_owned_by_its_members_and_counted(attacked):
    install_crds(attacked.plane, UPSTREAM_PODGROUP_CRD)
    ns = namespace(QUOTA)
    first = gang_pod(QUOTA)
    with attacked.as_syncer(QUOTA) as client:
        core = kubernetes.client.CoreV1Api(client)
        members = [client.sanitize_for_serialization(core.create_namespaced_pod(ns, first)) for _ in range(2)]
    assert pod_groups(attacked.plane, ns) == [], "admission wrote nothing"

    async def handle(pods: list[dict]) -> None:
        async with KubeClient.from_kubeconfig(str(attacked.plane.kubeconfig_path), CONFIG.field_manager) as client:
            groups = GangGroups(lambda: client)
            for pod in pods:
                await groups.on_event(None, pod)
    asyncio.run(handle(members))
    [group] = pod_groups(attacked.plane, ns)
    assert group["metadata"]["name"] == members[0]["metadata"]["annotations"][POD_GROUP_ANNOTATION]
    assert group["spec"] == {"minMember": 2, "queue": QUOTA}
    assert [(o["name"], o["uid"], o.get("controller")) for o in group["metadata"]["ownerReferences"]] == [
        (m["metadata"]["name"], m["metadata"]["uid"], None) for m in members]
    asyncio.run(handle(members))
    assert pod_groups(attacked.plane, ns)[0]["metadata"]["resourceVersion"] == group["metadata"]["resourceVersion"]

    with attacked.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        wait_for(lambda: core.read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, ns).status.used.get(
            POD_GROUPS_QUOTA) == "1", timeout=60, what="the tenant's quota to count the PodGroup")
        for member in members:
            core.delete_namespaced_pod(member["metadata"]["name"], ns, grace_period_seconds=0)
    wait_for(lambda: pod_groups(attacked.plane, ns) == [], timeout=120,
             what="the garbage collector to delete the PodGroup with its last member")
