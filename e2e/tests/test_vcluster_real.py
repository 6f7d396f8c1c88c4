"""The REAL vCluster (v0.36.1, built from its Go module) running on the plane's real node: the
upstream chart from ../shared/third_party installed with the values the operator renders for each
example tenant (one per trust level), through the operator's own Helm client, in the host
namespace the operator's render gives that tenant (its Pod Security level, ResourceQuota,
LimitRange).

Nothing here is simulated: the images are written by the project from binaries built from Go
modules (kubeplane.vcluster_images) and imported into the node's containerd; the data volume
claim is provisioned by the real local-path-provisioner (kubeplane.storage). The operator's
admission guard is not running in this test (the operator process is not started: it dials the
virtual cluster by its in-cluster Service name, which a process outside the node cannot reach).

It prints the vCluster pod's start time and memory (figures, not assertions).
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.helm.releases import ChartRef, VClusterReleases
from gputenant.policy.choose import decide
from gputenant.quantities import parse_quantity
from gputenant.render import render_tenant
from gputenant.render.podsecurity import POD_SECURITY_LEVEL
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.storage import PROVISIONER_NAME
from kubeplane.tools import REPO_ROOT, pinned_versions
from kubeplane.vcluster_images import vcluster_images

START_TIMEOUT_SECONDS = 420
"""The virtual control plane starts kine, kube-apiserver and kube-controller-manager inside one
pod on a 2-core machine shared with other work."""

pytestmark = [
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]


def operator_config() -> OperatorConfig:
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART))
    return OperatorConfig.model_validate(document)


def example_tenant(trust_file: str) -> GpuTenant:
    """examples/tenants/<trust_file>.yaml, on the Kubernetes version the distro image holds."""
    body = yaml.safe_load((REPO_ROOT / "examples" / "tenants" / f"{trust_file}.yaml").read_text())
    body["spec"].setdefault("vcluster", {})["kubernetesVersion"] = pinned_versions()["kube"]
    return GpuTenant.from_body(body)


def vcluster_pod(core: kubernetes.client.CoreV1Api, namespace: str, release: str) -> kubernetes.client.V1Pod | None:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app=vcluster,release={release}").items
    return pods[0] if pods else None


def container_ready(pod: kubernetes.client.V1Pod | None) -> bool:
    statuses = (pod and pod.status.container_statuses) or []
    return pod is not None and pod.status.phase == "Running" and bool(statuses) and all(s.ready for s in statuses)


def pod_working_set_bytes(plane: ControlPlane, namespace: str, name: str) -> int:
    """The pod's memory working set as the kubelet's summary API reports it."""
    summary = plane.kubectl("get", "--raw", f"/api/v1/nodes/{plane.node.name}/proxy/stats/summary").stdout
    [pod] = [p for p in yaml.safe_load(summary)["pods"]
             if p["podRef"]["namespace"] == namespace and p["podRef"]["name"] == name]
    return pod["memory"]["workingSetBytes"]


@pytest.mark.parametrize("trust_file", ["untrusted", "internal", "trusted"])
def test_the_real_vcluster_runs_in_the_tenant_namespace_and_its_kubeconfig_works(vcluster_node, trust_file: str,
                                                                                 tmp_path: Path, request):
    plane, config, tenant = vcluster_node, operator_config(), example_tenant(trust_file)
    decision = decide(tenant.name, tenant.spec, config)
    rendered = render_tenant(tenant, decision, config)
    namespace, release = naming.host_namespace(tenant.name, config), naming.release_name(tenant.name)
    plane.kubectl("apply", "--server-side", "--field-manager=gpu-tenant-operator", "-f", "-",
                  input=yaml.safe_dump_all(rendered.objects))
    # No operator owns these: remove them all (the cluster-scoped Queue too), or a later module's
    # operator meets a Queue of this tenant's name that it did not make (ObjectNotOwned).
    request.addfinalizer(lambda: plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                                               input=yaml.safe_dump_all(rendered.objects), check=False))
    releases = VClusterReleases(plane.kubeconfig_path, helm_path=plane.bin_dir / "helm")
    chart = ChartRef.from_config(config.vcluster)

    started = time.monotonic()
    outcome = asyncio.run(releases.ensure(release, namespace, chart, config.vcluster.version,
                                          rendered.vcluster_values, known_absent=True))
    with plane.api_client() as admin:
        core = kubernetes.client.CoreV1Api(admin)
        try:
            pod = wait_for(lambda: container_ready(p := vcluster_pod(core, namespace, release)) and p,
                           timeout=START_TIMEOUT_SECONDS, interval=1, what=f"the vCluster pod of {release} Ready")
        except TimeoutError:
            pod = vcluster_pod(core, namespace, release)
            described = plane.kubectl("describe", "pod", "-n", namespace, pod.metadata.name, check=False).stdout \
                if pod else plane.kubectl("get", "all,pvc,events", "-n", namespace, check=False).stdout
            raise AssertionError(f"the vCluster pod is not Ready:\n{described}") from None
        start_seconds = time.monotonic() - started
        secret = wait_for(lambda: _secret(core, namespace, naming.vcluster_secret_name(tenant.name)),
                          timeout=60, interval=1, what="Secret vc-<release> written by vCluster")
        namespace_labels = core.read_namespace(namespace).metadata.labels
        quota = core.read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, namespace)
        pods = core.list_namespaced_pod(namespace).items
        limit_ranges = [lr.metadata.name for lr in core.list_namespaced_limit_range(namespace).items]
        [claim] = core.list_namespaced_persistent_volume_claim(namespace).items
        volume = core.read_persistent_volume(claim.spec.volume_name)
        service_ip = core.read_namespaced_service(release, namespace).spec.cluster_ip
    memory_bytes = pod_working_set_bytes(plane, namespace, pod.metadata.name)
    print(f"\nreal vCluster {release} ({tenant.spec.trust.value}): helm {outcome.action.value}, pod Ready "
          f"{start_seconds:.1f}s after the install began; working set {memory_bytes / 2**20:.0f} MiB; host pods: "
          + ", ".join(f"{p.metadata.name} {p.status.phase} {_unscheduled_reason(p)}".rstrip() for p in pods))

    assert pod.spec.node_name == plane.node.name
    assert {c.image for c in pod.spec.containers + pod.spec.init_containers} <= set(vcluster_images(plane.bin_dir))
    assert namespace_labels["pod-security.kubernetes.io/enforce"] == POD_SECURITY_LEVEL[tenant.spec.trust]
    assert naming.LIMIT_RANGE_NAME in limit_ranges
    # the quota counts the vCluster pod's limits (and those of the CoreDNS pod it synced here)
    assert all(c.resources.limits.get("memory") for c in pod.spec.containers)
    assert parse_quantity(quota.status.used["limits.memory"]) == sum(
        parse_quantity(c.resources.limits["memory"]) for p in pods for c in p.spec.containers)
    assert claim.status.phase == "Bound"
    assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"] == PROVISIONER_NAME

    kubeconfig = yaml.safe_load(base64.b64decode(secret.data["config"]))
    [cluster] = kubeconfig["clusters"]
    assert cluster["cluster"]["server"] == naming.vcluster_in_cluster_server(tenant.name, config)
    kubeconfig_path = tmp_path / "vcluster.kubeconfig"
    kubeconfig_path.write_text(yaml.safe_dump(kubeconfig))
    # From inside the node's network, where the Service answers; the certificate is checked
    # against the in-cluster name the kubeconfig names.
    listed = plane.node.network.enter([
        str(plane.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig_path}", f"--server=https://{service_ip}:443",
        f"--tls-server-name={release}.{namespace}.svc", "get", "namespaces", "-o", "name"])
    namespaces = subprocess.run(listed, check=True, capture_output=True, text=True, timeout=60).stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(namespaces)

    asyncio.run(releases.uninstall(release, namespace))
    plane.kubectl("delete", "namespace", namespace, "--wait=false")
    # the claim goes with the namespace; its volume and the directory behind it go with the claim
    with plane.api_client() as admin:
        storage = kubernetes.client.CoreV1Api(admin)
        wait_for(lambda: not _volume_exists(storage, volume.metadata.name), timeout=180, interval=1,
                 what=f"PersistentVolume {volume.metadata.name} deleted by the provisioner")
    assert not Path(volume.spec.host_path.path).exists()


def _unscheduled_reason(pod: kubernetes.client.V1Pod) -> str:
    return next((f"({c.message})" for c in pod.status.conditions or []
                 if c.type == "PodScheduled" and c.status == "False"), "")


def _volume_exists(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    try:
        core.read_persistent_volume(name)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _secret(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> kubernetes.client.V1Secret | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise
