"""A REAL vCluster (v0.36.1) tenant's pods as the admission guard places and groups them, scheduled
by the real KAI-Scheduler (v0.12): CoreDNS and a CPU-only pod on the CPU node (examples/config.yaml
cpuPool; the plane's real node carries its label), GPU pods on the tenant's pool, and a 4-pod Job
of the virtual cluster as one gang that runs whole or waits whole. The GPU nodes are kwok-SIMULATED
(no GPU hardware here; the gang test sets their free capacity by writing their allocatable);
everything else is real: the operator, the upstream chart, the syncer, the guard, KAI.

vCluster forces `sync.fromHost.nodes.selector.labels` onto every synced pod (pods/syncer.go,
v0.36.1), so before the guard placed pods CoreDNS and CPU pods landed on GPU nodes; and with
`setOwner: false` KAI's pod-grouper made every synced pod its own PodGroup of one.
"""

from __future__ import annotations

import base64
import time
from contextlib import contextmanager
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant import naming
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.images import TEST_IMAGE
from kubeplane.tools import REPO_ROOT, pinned_versions

READY_TIMEOUT_SECONDS = 480
PLACED_TIMEOUT_SECONDS = 180
POOL = "a100-timeslice"
"""The Trusted example tenant's pool (TimeSlicing)."""
GPU = "nvidia.com/gpu"
GANG_SIZE = 4
HELD_SECONDS = 20
"""How long a short gang is watched not to start: many KAI scheduling cycles (1 s each)."""
VIRTUAL_NAME = "vcluster.loft.sh/name"
VIRTUAL_NAMESPACE = "vcluster.loft.sh/namespace"

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"{REAL_VCLUSTER_CHART} is missing")


@pytest.fixture(scope="module")
def gpu_operator_namespace(vcluster_kai):
    """The namespace of the device-plugin ConfigMap (config devicePluginConfigMap), as a cluster with
    the GPU Operator has it. Without it the operator's pools round fails before it creates the
    parent Queue (gpu-tenants), and KAI drops the tenant's Queue as an orphan: no GPU pod would run.
    Requested before the operator starts; removed afterwards if this module created it."""
    plane = vcluster_kai.plane
    name = vcluster_kai.config.device_plugin_config_map.namespace
    created = plane.kubectl("create", "namespace", name, check=False).returncode == 0
    yield name
    if created:
        plane.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def trusted(gpu_operator_namespace, vcluster_kai, real_tenants) -> dict:
    """examples/tenants/trusted.yaml (TimeSlicing on a100-timeslice), Ready on a real vCluster."""
    body = yaml.safe_load((REPO_ROOT / "examples" / "tenants" / "trusted.yaml").read_text())
    body["spec"]["vcluster"] = {"kubernetesVersion": pinned_versions()["kube"]}
    body["spec"]["preventDeletion"] = False
    real_tenants.apply(body)
    return real_tenants.wait_ready(body["metadata"]["name"], timeout=READY_TIMEOUT_SECONDS)


def virtual_kubeconfig(plane: ControlPlane, tenant: dict, path: Path) -> Path:
    """The tenant's admin kubeconfig of its virtual cluster (NodePort at the node's address)."""
    name = tenant["metadata"]["name"]
    secret = yaml.safe_load(plane.kubectl("get", "secret", naming.kubeconfig_secret_name(name, "admin"), "-n",
                                          tenant["status"]["namespace"], "-o", "yaml").stdout)
    path.write_bytes(base64.b64decode(secret["data"]["config"]))
    return path


def host_node_of(plane: ControlPlane, namespace: str, virtual_namespace: str, name_prefix: str) -> str:
    """The node of the host pod vCluster synced from a virtual pod, once the host has bound it."""
    def bound():
        with plane.api_client() as admin:
            pods = kubernetes.client.CoreV1Api(admin).list_namespaced_pod(namespace).items
        for pod in pods:
            annotations = pod.metadata.annotations or {}
            if (annotations.get(VIRTUAL_NAMESPACE) == virtual_namespace
                    and annotations.get(VIRTUAL_NAME, "").startswith(name_prefix) and pod.spec.node_name):
                return pod.spec.node_name
        return None
    return wait_for(bound, timeout=PLACED_TIMEOUT_SECONDS, interval=1,
                    what=f"host pod of {virtual_namespace}/{name_prefix}* bound to a node")


def virtual_pod(name: str, gpus: int = 0) -> dict:
    container = {"name": "main", "image": TEST_IMAGE, "command": ["sleep", "3600"],
                 "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}
    if gpus:
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}


def test_coredns_and_cpu_pods_run_on_the_cpu_node_and_gpu_pods_on_the_pool(vcluster_kai, trusted, tmp_path):
    plane = vcluster_kai.plane
    namespace = trusted["status"]["namespace"]
    kubeconfig = virtual_kubeconfig(plane, trusted, tmp_path / "admin.kubeconfig")
    manifests = [virtual_pod("cpu-only"), virtual_pod("trainer", gpus=1)]
    plane.kubectl("apply", "-f", "-", kubeconfig_path=kubeconfig, input=yaml.safe_dump_all(manifests))
    cpu_node = plane.node.name
    try:
        assert host_node_of(plane, namespace, "kube-system", "coredns") == cpu_node
        assert host_node_of(plane, namespace, "default", "cpu-only") == cpu_node
        assert host_node_of(plane, namespace, "default", "trainer") in vcluster_kai.node_names(POOL)
    finally:
        plane.kubectl("delete", "pod", "cpu-only", "trainer", "--wait=false", kubeconfig_path=kubeconfig)


def gang_job(name: str) -> dict:
    """A Job of GANG_SIZE pods, one time-slice GPU each, asking the guard for a gang of all of them."""
    container = {"name": "main", "image": TEST_IMAGE, "command": ["sleep", "3600"],
                 "resources": {"limits": {"cpu": "50m", "memory": "32Mi", GPU: "1"}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"parallelism": GANG_SIZE, "completions": GANG_SIZE, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {"gputenant.io/gang-size": str(GANG_SIZE)}},
                                  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                           "containers": [container]}}}}


def gpus_in_use(core: kubernetes.client.CoreV1Api, node: str) -> int:
    """GPUs held by the node's pods; one on its way out counts, so wait for it to be gone first."""
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return sum(int((c.resources.limits or {}).get(GPU, 0)) for pod in pods
               if pod.status.phase not in ("Succeeded", "Failed") for c in pod.spec.containers)


def holds_pool_gpus(core: kubernetes.client.CoreV1Api, namespace: str, nodes: list[str]) -> bool:
    return any(pod.spec.node_name in nodes for pod in core.list_namespaced_pod(namespace).items)


def set_free_gpus(core: kubernetes.client.CoreV1Api, nodes: list[str], free: int) -> None:
    """Simulated capacity: the first node gets `free` GPUs beyond what its pods use, the others none."""
    for index, node in enumerate(nodes):
        amount = str(gpus_in_use(core, node) + (free if index == 0 else 0))
        core.patch_node_status(node, {"status": {"capacity": {GPU: amount}, "allocatable": {GPU: amount}}})


@contextmanager
def pool_capacity(core: kubernetes.client.CoreV1Api, nodes: list[str]):
    """Restore the pool nodes' GPU capacity afterwards: the plane is the session's."""
    original = {node: core.read_node(node).status.capacity[GPU] for node in nodes}
    try:
        yield
    finally:
        for node, amount in original.items():
            core.patch_node_status(node, {"status": {"capacity": {GPU: amount}, "allocatable": {GPU: amount}}})


def gang_pods(core: kubernetes.client.CoreV1Api, namespace: str, job: str) -> list:
    return [pod for pod in core.list_namespaced_pod(namespace).items
            if (pod.metadata.annotations or {}).get(VIRTUAL_NAME, "").startswith(f"{job}-")]


def test_a_four_pod_job_from_the_virtual_cluster_runs_only_whole(vcluster_kai, trusted, tmp_path):
    plane = vcluster_kai.plane
    namespace, tenant_name = trusted["status"]["namespace"], trusted["metadata"]["name"]
    kubeconfig = virtual_kubeconfig(plane, trusted, tmp_path / "admin.kubeconfig")
    nodes = sorted(vcluster_kai.node_names(POOL))
    with plane.api_client() as admin, pool_capacity(kubernetes.client.CoreV1Api(admin), nodes):
        core = kubernetes.client.CoreV1Api(admin)
        wait_for(lambda: not holds_pool_gpus(core, namespace, nodes), timeout=PLACED_TIMEOUT_SECONDS, interval=1,
                 what=f"the tenant's earlier pods on {POOL} gone")
        set_free_gpus(core, nodes, free=GANG_SIZE - 1)
        plane.kubectl("apply", "-f", "-", kubeconfig_path=kubeconfig, input=yaml.safe_dump(gang_job("train")))
        try:
            members = wait_for(lambda: (lambda pods: pods if len(pods) == GANG_SIZE else None)(
                gang_pods(core, namespace, "train")), timeout=PLACED_TIMEOUT_SECONDS, interval=1,
                what=f"{GANG_SIZE} host pods of the virtual Job")
            [group_name] = {pod.metadata.annotations["pod-group-name"] for pod in members}
            assert group_name.startswith(f"gang.{tenant_name}.")
            custom = kubernetes.client.CustomObjectsApi(admin)
            group = wait_for(lambda: next((g for g in custom.list_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", namespace, "podgroups")["items"]
                if g["metadata"]["name"] == group_name), None), timeout=PLACED_TIMEOUT_SECONDS, interval=1,
                what="the operator to write the gang's PodGroup")
            assert group["spec"]["minMember"] == GANG_SIZE
            assert group["spec"]["queue"] == naming.queue_name(tenant_name)

            time.sleep(HELD_SECONDS)
            bound = [pod.metadata.name for pod in gang_pods(core, namespace, "train") if pod.spec.node_name]
            assert bound == [], f"{len(bound)} of the gang started on {GANG_SIZE - 1} free GPUs: {bound}"

            set_free_gpus(core, nodes, free=GANG_SIZE)
            placed = wait_for(lambda: (lambda pods: pods if all(p.spec.node_name for p in pods) else None)(
                gang_pods(core, namespace, "train")), timeout=PLACED_TIMEOUT_SECONDS, interval=1,
                what="the whole gang bound once 4 GPUs are free")
            assert {pod.spec.node_name for pod in placed} <= set(nodes) and len(placed) == GANG_SIZE

            # The operator wrote the PodGroup after admission, owned by every member: it goes with the last.
            members_uids = sorted(p.metadata.uid for p in placed)
            wait_for(lambda: sorted(o["uid"] for o in custom.get_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", namespace, "podgroups", group_name)["metadata"]["ownerReferences"])
                == members_uids, timeout=PLACED_TIMEOUT_SECONDS, interval=1, what="every member an owner")
            plane.kubectl("delete", "job", "train", "--cascade=background", "--wait=false", kubeconfig_path=kubeconfig)
            wait_for(lambda: group_name not in {g["metadata"]["name"] for g in custom.list_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", namespace, "podgroups")["items"]}, timeout=PLACED_TIMEOUT_SECONDS,
                interval=1, what="the gang's PodGroup deleted with its last member")
        finally:
            plane.kubectl("delete", "job", "train", "--cascade=background", "--wait=false", "--ignore-not-found",
                          kubeconfig_path=kubeconfig)
