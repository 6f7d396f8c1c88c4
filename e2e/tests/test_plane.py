"""The local control plane behaves like a real cluster wherever the operator's tests rely on it."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gputenant.config.models import OperatorConfig
from kubeplane import ControlPlane, wait_for
from kubeplane.gpu_nodes import create_nodes
from kubeplane.gpu_nodes import pool_nodes as simulated_nodes
from kubeplane.process import pid_alive, port_is_free


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def admin(plane):
    with plane.api_client() as api:
        yield api


@pytest.fixture
def namespace(plane, admin):
    name = plane.create_namespace(unique("plane")).metadata.name
    yield name
    client.CoreV1Api(admin).delete_namespace(name)


def gpu_pod(name: str, gpus: int) -> client.V1Pod:
    container = client.V1Container(name="cuda", image="nvidia/cuda:12.4.1-base-ubuntu22.04",
                                   resources=client.V1ResourceRequirements(
                                       limits={"nvidia.com/gpu": str(gpus)}))
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name),
                        spec=client.V1PodSpec(containers=[container]))


def status_of(call) -> int:
    try:
        call()
    except ApiException as error:
        return error.status
    return 200


def test_starts_and_stops_cleanly_twice():
    for _ in range(2):
        plane = ControlPlane().start()
        pids, ports, directory = plane.pids, plane.ports, plane.directory
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert all(pid_alive(pid) for pid in pids.values())

        plane.stop()

        assert [name for name, pid in pids.items() if pid_alive(pid)] == []
        assert [name for name, port in ports.items() if not port_is_free(port)] == []
        assert not directory.exists()


def test_rbac_denies_a_user_until_a_role_binding_grants_access(plane, admin, namespace):
    with plane.api_client(plane.user("alice", groups=["team-a"])) as alice:
        list_pods = lambda: client.CoreV1Api(alice).list_namespaced_pod(namespace)  # noqa: E731
        assert status_of(list_pods) == 403

        rbac = client.RbacAuthorizationV1Api(admin)
        rbac.create_namespaced_role(namespace, client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])]))
        rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="alice-reads-pods"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                      name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="User", name="alice",
                                           api_group="rbac.authorization.k8s.io")]))

        wait_for(lambda: status_of(list_pods) == 200, what="the RoleBinding to take effect")


def test_resource_quota_admission_rejects_pods_over_the_gpu_quota(admin, namespace):
    core = client.CoreV1Api(admin)
    core.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="gpus"),
        spec=client.V1ResourceQuotaSpec(hard={"requests.nvidia.com/gpu": "2"})))
    # Admission rejects every pod until the quota controller has published status.hard.
    wait_for(lambda: core.read_namespaced_resource_quota("gpus", namespace).status.hard,
             what="the quota controller to fill in status.hard")

    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(namespace, gpu_pod("too-big", gpus=3))
    assert rejected.value.status == 403
    assert "exceeded quota: gpus" in rejected.value.body
    assert "requested: requests.nvidia.com/gpu=3" in rejected.value.body

    core.create_namespaced_pod(namespace, gpu_pod("fits", gpus=2))
    wait_for(lambda: core.read_namespaced_resource_quota("gpus", namespace).status.used
             == {"requests.nvidia.com/gpu": "2"}, what="quota usage to count the admitted pod")


def test_deleting_a_namespace_removes_its_contents(plane, admin):
    core = client.CoreV1Api(admin)
    name = plane.create_namespace(unique("doomed")).metadata.name
    core.create_namespaced_config_map(name, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="settings"), data={"a": "b"}))
    core.create_namespaced_pod(name, gpu_pod("worker", gpus=1))

    core.delete_namespace(name)

    wait_for(lambda: status_of(lambda: core.read_namespace(name)) == 404, timeout=60,
             what=f"namespace {name} to be deleted")
    assert core.list_config_map_for_all_namespaces(field_selector=f"metadata.namespace={name}").items == []
    assert core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={name}").items == []


def test_statefulset_controller_creates_the_pod(admin, namespace):
    labels = {"app": "web"}
    client.AppsV1Api(admin).create_namespaced_stateful_set(namespace, client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1StatefulSetSpec(
            service_name="web", replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx")])))))

    pods = wait_for(lambda: client.CoreV1Api(admin).list_namespaced_pod(namespace).items,
                    what="the statefulset controller to create web-0")

    [pod] = pods
    assert pod.metadata.name == "web-0"
    assert [(ref.kind, ref.name) for ref in pod.metadata.owner_references] == [("StatefulSet", "web")]
    assert pod.status.phase == "Pending"  # no kubelet or scheduler: admitted, never run


def request_token(api: client.ApiClient, namespace: str, service_account: str) -> str:
    return client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))).status.token


def whoami(api: client.ApiClient) -> str:
    review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    return review.status.user_info.username


def test_service_account_token_from_token_request_authenticates(plane, admin, namespace):
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot")))
    token = request_token(admin, namespace, "robot")

    with plane.api_client(plane.kubeconfig_for_token(token, f"{namespace}-robot")) as robot:
        assert whoami(robot) == f"system:serviceaccount:{namespace}:robot"


def test_virtual_apiserver_is_a_separate_api_with_its_own_tokens(plane, admin):
    virtual = plane.start_virtual_apiserver(unique("tenant"))
    try:
        with virtual.api_client() as inside:
            core = client.CoreV1Api(inside)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="inside-only")))
            assert status_of(lambda: client.CoreV1Api(admin).read_namespace("inside-only")) == 404

            # no controller-manager inside: the ServiceAccount is created by hand
            core.create_namespaced_service_account(
                "inside-only", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot")))
            token = request_token(inside, "inside-only", "robot")
        with virtual.api_client(virtual.kubeconfig_for_token(token, "robot")) as robot:
            assert whoami(robot) == "system:serviceaccount:inside-only:robot"
        with plane.api_client(plane.kubeconfig_for_token(token, "virtual-robot")) as outside:
            assert status_of(lambda: whoami(outside)) == 401  # signed by the virtual apiserver's key
    finally:
        pid, port = virtual.pid, virtual.port
        virtual.stop()
    assert not pid_alive(pid)
    assert port_is_free(port)


def test_audit_log_counts_write_requests_per_user_and_client(plane, namespace):
    writer = plane.user(unique("writer"), groups=["system:masters"])
    writer_name = client.AuthenticationV1Api(plane.api_client(writer)).create_self_subject_review(
        client.V1SelfSubjectReview()).status.user_info.username
    since = plane.audit_offset()

    with plane.api_client(writer) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="counted")))
        core.patch_namespaced_config_map("counted", namespace, {"data": {"k": "v"}})
        core.read_namespaced_config_map("counted", namespace)
    plane.kubectl("delete", "configmap", "counted", "-n", namespace, kubeconfig_path=writer)

    assert plane.count_requests(since, user=writer_name) == 3
    assert plane.count_requests(since, user=writer_name, user_agent="kubectl") == 1
    assert plane.count_requests(since, verbs=None, user=writer_name) >= 4  # + the read (+ kubectl discovery)
    assert plane.count_requests(since, verbs={"get"}, user=writer_name, user_agent="OpenAPI-Generator") == 1


def test_kubectl_and_helm_are_the_pinned_tools_talking_to_the_plane(plane):
    assert "namespace/default" in plane.kubectl("get", "namespaces", "-o", "name").stdout
    assert plane.helm("version", "--short").stdout.startswith("v3.22.0")
    assert isinstance(json.loads(plane.helm("list", "--all-namespaces", "--output", "json").stdout), list)


def test_simulated_gpu_nodes_are_ready_show_their_capacity_and_run_bound_pods(plane, kwok, admin, namespace):
    """GPU nodes are SIMULATED by kwok (kubeplane.gpu_nodes): the API shows what the GPU Operator
    would advertise, a pod bound to one becomes Running without a container, and a deleted one goes."""
    suffix = uuid.uuid4().hex[:6]
    pools = OperatorConfig.model_validate({
        "pools": [
            {"name": f"whole-{suffix}", "mode": "Exclusive", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
             "gpus": 8, "nodeSelector": {"plane-test": suffix}},
            {"name": f"mig-{suffix}", "mode": "MIG", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559, "gpus": 2,
             "nodeSelector": {"plane-test": suffix}, "mig": {"config": "all-balanced", "profiles": ["1g.10gb"]}},
            {"name": f"hami-{suffix}", "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 24576, "gpus": 2,
             "nodeSelector": {"plane-test": suffix}, "hami": {}},
        ],
        "trustModes": {"Trusted": "Exclusive", "Internal": "HAMi", "Untrusted": "MIG"}})
    nodes = simulated_nodes(pools)
    whole, mig, hami = (node.name for node in nodes)
    core = client.CoreV1Api(admin)
    try:
        create_nodes(admin, nodes)
        allocatable = {name: core.read_node(name).status.allocatable for name in (whole, mig, hami)}
        assert allocatable[whole]["nvidia.com/gpu"] == "8"
        assert {key: value for key, value in allocatable[mig].items() if key.startswith("nvidia.com/")} == {
            "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-2g.20gb": "2",
            "nvidia.com/mig-3g.40gb": "2"}
        # HAMi mode is KAI fractions on NVIDIA's device plugin: whole GPUs, their memory in a label.
        assert allocatable[hami]["nvidia.com/gpu"] == "2"
        assert core.read_node(hami).metadata.labels["nvidia.com/gpu.memory"] == "24576"
        assert [node.metadata.name for node in core.list_node(label_selector=f"plane-test={suffix}").items] == \
            sorted([whole, mig, hami])
        assert core.read_node(mig).metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB"

        pod = gpu_pod("bound", 2)
        pod.spec.node_name = whole
        core.create_namespaced_pod(namespace, pod)
        wait_for(lambda: core.read_namespaced_pod("bound", namespace).status.phase == "Running", timeout=30,
                 what="kwok to run the pod bound to a simulated node")
        core.delete_namespaced_pod("bound", namespace)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout=30,
                 what="kwok to finish the pod's graceful deletion")
    finally:
        for name in (whole, mig, hami):
            core.delete_node(name)


def test_service_ips_beyond_the_first_256_are_allocatable(admin, namespace):
    """One vCluster Service per tenant: hundreds of tenants need more than a /24 of ClusterIPs."""
    service = client.V1Service(metadata=client.V1ObjectMeta(name="far"), spec=client.V1ServiceSpec(
        cluster_ip="10.0.200.5", ports=[client.V1ServicePort(port=443)]))
    created = client.CoreV1Api(admin).create_namespaced_service(namespace, service)
    assert created.spec.cluster_ip == "10.0.200.5"
