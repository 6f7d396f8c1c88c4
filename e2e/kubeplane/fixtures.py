"""The KAI-Scheduler / GPU Operator CRDs the operator expects to find on a GPU cluster. GPU nodes
are SIMULATED by kwok: see kubeplane.gpu_nodes and kubeplane.kwok.

Every function takes a `ControlPlane` or a `VirtualAPIServer` (anything with `api_client()`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from .builders import container, pod
from .conversion import point_tenant_crd_here
from .plane import ControlPlane
from .process import wait_for
from .tools import REPO_ROOT
from .vcluster_chart import chart_dir
from .virtual_apiserver import VirtualAPIServer

Target = ControlPlane | VirtualAPIServer

# Upstream files are read where they are, never copied (see ../shared/third_party/README.md).
THIRD_PARTY_DIR = REPO_ROOT.parent / "shared" / "third_party"
UPSTREAM_QUEUE_CRD = THIRD_PARTY_DIR / "kai-scheduler-v0.12.17" / "scheduling.run.ai_queues.yaml"
UPSTREAM_PODGROUP_CRD = THIRD_PARTY_DIR / "kai-scheduler-v0.12.17" / "scheduling.run.ai_podgroups.yaml"
UPSTREAM_CLUSTERPOLICY_CRD = THIRD_PARTY_DIR / "gpu-operator" / "nvidia.com_clusterpolicies.yaml"
REAL_VCLUSTER_CHART = chart_dir()
"""The upstream chart, unmodified but for its version stamp: what `helm install --repo
https://charts.loft.sh vcluster --version 0.36.1` installs; ../shared's copy, or the one `make
tools` made from the vCluster Go module (kubeplane.vcluster_chart)."""
ARGOCD_NAMESPACE = "argocd"
MINIMAL_QUEUE_CRD = REPO_ROOT / "e2e" / "fixtures" / "kai-queue-crd.yaml"
TENANT_CRD_NAME = "gputenants.gputenant.io"


def install_crds(target: Target, path: Path, timeout: float = 30) -> list[str]:
    """Create or update every CRD in the YAML file `path`, wait until each is Established and
    served, and return their names. Updating keeps existing custom objects. The GpuTenant CRD's
    conversion webhook is this process's (kubeplane.conversion) until an operator points it at its own."""
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
                crd["metadata"]["resourceVersion"] = existing.metadata.resource_version  # type: ignore[union-attr]
                extensions.replace_custom_resource_definition(crd["metadata"]["name"], crd)
            if crd["metadata"]["name"] == TENANT_CRD_NAME and crd["spec"].get("conversion", {}).get("strategy") == "Webhook":
                point_tenant_crd_here(client)
        names = [crd["metadata"]["name"] for crd in documents]
        for name in names:
            wait_for(functools.partial(_established, extensions, name), timeout=timeout,
                     what=f"CRD {name} to be Established")
    return names


def _established(extensions: kubernetes.client.ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition_status(name).status.conditions or []  # type: ignore[union-attr]
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_kai_queue_crd(target: Target, prefer_upstream: bool = True) -> Path:
    """Install KAI's Queue CRD: the real upstream one when it is on disk (and preferred), else the
    project's minimal one. Returns the file installed, so tests can report which."""
    path = UPSTREAM_QUEUE_CRD if prefer_upstream and UPSTREAM_QUEUE_CRD.is_file() else MINIMAL_QUEUE_CRD
    install_crds(target, path)
    return path


def chart_operator_access(plane: ControlPlane, fullname: str, namespace: str, directory: Path) -> tuple[Path, Path]:
    """What the operator's pod gets from its Helm chart, to run it on the host as that pod would: a
    kubeconfig with a token of its ServiceAccount (one hour), and its config as the chart rendered
    it (ConfigMap `<fullname>-config`), written to `directory`/config.yaml."""
    rendered = plane.kubectl("get", "configmap", f"{fullname}-config", "-n", namespace, "-o",
                             "jsonpath={.data.config\\.yaml}").stdout
    token = plane.kubectl("create", "token", fullname, "-n", namespace, "--duration=1h").stdout.strip()
    config_path = directory / "config.yaml"
    config_path.write_text(rendered)
    return plane.kubeconfig_for_token(token, f"system:serviceaccount:{namespace}:{fullname}"), config_path


def label_cpu_node(plane: ControlPlane, node_selector: dict[str, str]) -> None:
    """Give the plane's real node the configuration's `cpuPool.nodeSelector` labels: it is the CPU
    node the guard sends every tenant pod without GPUs to (the vCluster control plane, CoreDNS)."""
    plane.kubectl("label", "node", plane.require_node().name, "--overwrite",
                  *(f"{key}={value}" for key, value in node_selector.items()))


def guard_serves(target: Target, namespace: str) -> bool:
    """The admission guard answers for `namespace`: a dry-run GPU pod comes back steered to KAI, or
    refused for its GPU resource (which also proves the guard knows the tenant)."""
    probe: Any = pod(container(limits={"nvidia.com/gpu": "1"}))
    with target.api_client() as client:
        try:
            answer = kubernetes.client.CoreV1Api(client).create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as error:
            return "[gpu-resource]" in (error.body or "")
        return answer.spec is not None and answer.spec.scheduler_name == "kai-scheduler"


def remove_tenants(target: Target, namespaces: dict[str, str]) -> None:
    """GpuTenants a test wrote without an operator to offboard them (tenant -> host namespace), and
    their namespaces."""
    with target.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        for tenant, namespace in namespaces.items():
            core.delete_namespace(namespace)
            custom.delete_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", tenant)
