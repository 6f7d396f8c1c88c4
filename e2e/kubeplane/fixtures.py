"""What the operator expects to find on a GPU cluster, for a plane that has no GPUs: fake GPU Nodes
labelled the way NVIDIA's GPU feature discovery, MIG manager and HAMi label them, and the
KAI-Scheduler / GPU Operator CRDs.

Every function takes a `ControlPlane` or a `VirtualAPIServer` (anything with `api_client()`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from .plane import ControlPlane, VirtualAPIServer, wait_for
from .tools import REPO_ROOT

Target = ControlPlane | VirtualAPIServer

# Upstream files are read where they are, never copied (see ../shared/third_party/README.md).
THIRD_PARTY_DIR = REPO_ROOT.parent / "shared" / "third_party"
UPSTREAM_QUEUE_CRD = THIRD_PARTY_DIR / "kai-scheduler-v0.12.17" / "scheduling.run.ai_queues.yaml"
UPSTREAM_PODGROUP_CRD = THIRD_PARTY_DIR / "kai-scheduler-v0.12.17" / "scheduling.run.ai_podgroups.yaml"
UPSTREAM_CLUSTERPOLICY_CRD = THIRD_PARTY_DIR / "gpu-operator" / "nvidia.com_clusterpolicies.yaml"
MINIMAL_QUEUE_CRD = REPO_ROOT / "e2e" / "fixtures" / "kai-queue-crd.yaml"

GPU = "nvidia.com/gpu"
HAMI_SLOTS_PER_GPU = 10  # HAMi's default deviceSplitCount


def gpu_node_manifest(
    name: str, *, product: str = "NVIDIA-A100-SXM4-80GB", gpus: int = 8,
    gpu_memory_mib: int = 81920, mig_capable: bool = True,
    mig_profiles: Mapping[str, int] | None = None, mig_config: str = "all-balanced",
    time_slicing_replicas: int | None = None, hami: bool = False,
    device_plugin_config: str | None = None, labels: Mapping[str, str] | None = None,
    cpu: str = "64", memory: str = "512Gi",
) -> dict:
    """A Node as the GPU Operator leaves it; `status` must be written through the status subresource.

    - whole GPUs: `nvidia.com/gpu: gpus`;
    - MIG mixed strategy (`mig_profiles`, e.g. {"1g.10gb": 14}, counts per node): every GPU is
      partitioned, so `nvidia.com/gpu: 0` and one `nvidia.com/mig-<profile>` resource each;
    - time-slicing: `nvidia.com/gpu: gpus * replicas`, product label suffixed `-SHARED`;
    - HAMi: `nvidia.com/gpu` counts vGPU slots, `nvidia.com/gpumem` MiB and `nvidia.com/gpucores`
      percent over all GPUs (real HAMi keeps the last two in a node annotation; capacity here lets
      tests see them with the plain API).
    """
    resources = {GPU: str(gpus)}
    node_labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(gpu_memory_mib), "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/mig.capable": str(mig_capable).lower(),
        "nvidia.com/mig.config": "all-disabled",
    }
    if mig_profiles:
        resources[GPU] = "0"
        node_labels.update({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": mig_config,
                            "nvidia.com/mig.config.state": "success"})
        for profile, count in mig_profiles.items():
            resources[f"nvidia.com/mig-{profile}"] = str(count)
            node_labels[f"nvidia.com/mig-{profile}.count"] = str(count)
    if time_slicing_replicas:
        resources[GPU] = str(gpus * time_slicing_replicas)
        node_labels.update({"nvidia.com/gpu.product": f"{product}-SHARED",
                            "nvidia.com/gpu.replicas": str(time_slicing_replicas),
                            "nvidia.com/gpu.sharing-strategy": "time-slicing"})
    if hami:
        resources.update({GPU: str(gpus * HAMI_SLOTS_PER_GPU),
                          "nvidia.com/gpumem": str(gpus * gpu_memory_mib),
                          "nvidia.com/gpucores": str(gpus * 100)})
        node_labels["gpu"] = "on"  # the label HAMi's device plugin DaemonSet selects
    if device_plugin_config:
        node_labels["nvidia.com/device-plugin.config"] = device_plugin_config
    node_labels.update(labels or {})
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", **resources}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake GPU node (kubeplane)"}],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def create_gpu_node(target: Target, name: str, **options) -> kubernetes.client.V1Node:
    """Create a fake GPU Node (options as in gpu_node_manifest) and write its status."""
    manifest = gpu_node_manifest(name, **options)
    status = manifest.pop("status")
    with target.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_node(manifest)
        return core.patch_node_status(name, {"status": status})


def install_crds(target: Target, path: Path, timeout: float = 30) -> list[str]:
    """Create or update every CRD in the YAML file `path`, wait until each is Established and
    served, and return their names. Updating keeps existing custom objects."""
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    with target.api_client() as client:
        extensions = kubernetes.client.ApiextensionsV1Api(client)
        for crd in documents:
            try:
                extensions.create_custom_resource_definition(crd)
            except ApiException as error:
                if error.status != 409:
                    raise
                existing = extensions.read_custom_resource_definition(crd["metadata"]["name"])
                crd["metadata"]["resourceVersion"] = existing.metadata.resource_version
                extensions.replace_custom_resource_definition(crd["metadata"]["name"], crd)
        names = [crd["metadata"]["name"] for crd in documents]
        for name in names:
            wait_for(lambda name=name: _established(extensions, name), timeout=timeout,
                     what=f"CRD {name} to be Established")
    return names


def _established(extensions: kubernetes.client.ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition_status(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_kai_queue_crd(target: Target, prefer_upstream: bool = True) -> Path:
    """Install KAI's Queue CRD: the real upstream one when it is on disk (and preferred), else the
    project's minimal one. Returns the file installed, so tests can report which."""
    path = UPSTREAM_QUEUE_CRD if prefer_upstream and UPSTREAM_QUEUE_CRD.is_file() else MINIMAL_QUEUE_CRD
    install_crds(target, path)
    return path
