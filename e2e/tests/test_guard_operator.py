"""The admission guard served by the operator itself: `gputenant run --webhook-host 127.0.0.1`
(generated certificates, a loopback port) registers its webhook configurations with the real
apiserver and answers for the tenants it reconciles.

The tenant's pods are created here by a client-certificate user bound to `edit` in the host
namespace, as the vCluster syncer creates them there, so each case is one API call. The tenant's
vCluster is the REAL chart on the plane's node, applied once the guard is registered, so the
tenant reaching Ready proves its pod was admitted with the guard on.
"""

from __future__ import annotations

import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.guard.capabilities import drops_spoofing
from gputenant.guard.configuration import CONFIGURATION_NAME
from kubeplane import wait_for

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

TENANT = "guard-op"
NAMESPACE = f"tenant-{TENANT}"
QUEUE = naming.QUEUE_LABEL
TENANT_USER = f"{TENANT}-syncer"
GPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "train-"},
           "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
POLICY = f"tenant {TENANT}: trust Trusted, sharing TimeSlicing on pool a100-timeslice"


def webhook_configurations(plane) -> tuple[dict, dict] | None:
    with plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        try:
            return (client.sanitize_for_serialization(admission.read_mutating_webhook_configuration(CONFIGURATION_NAME)),
                    client.sanitize_for_serialization(admission.read_validating_webhook_configuration(CONFIGURATION_NAME)))
        except ApiException as error:
            if error.status == 404:
                return None
            raise


@pytest.fixture(scope="module")
def guarded_tenant(plane, operator, tenants_api):
    """A Trusted tenant applied once the operator's guard is registered (so its vCluster pod is
    created under it), Ready, with a user allowed to create pods in its host namespace."""
    try:
        configurations = wait_for(lambda: webhook_configurations(plane), timeout=60, interval=0.5,
                                  what="the operator to register its webhook configurations")
    except TimeoutError:
        raise AssertionError(f"no webhook configurations; operator log:\n{operator.log_tail()}") from None
    tenants_api.apply(tenants_api.manifest(TENANT, "Trusted", f"{TENANT}-owner", gpus=1))
    tenants_api.wait_ready(TENANT)
    user_kubeconfig = plane.user(TENANT_USER)
    with plane.api_client() as client:
        kubernetes.client.RbacAuthorizationV1Api(client).create_namespaced_role_binding(NAMESPACE, {
            "metadata": {"name": "syncer-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}]})
    return configurations, user_kubeconfig


def create_pod(plane, namespace: str, manifest: dict, kubeconfig=None) -> dict:
    with plane.api_client(kubeconfig) as client:
        created = kubernetes.client.CoreV1Api(client).create_namespaced_pod(namespace, manifest)
        return client.sanitize_for_serialization(created)


def test_the_operator_registers_its_webhook_configurations(operator, guarded_tenant):
    (mutating, validating), _ = guarded_tenant
    port = operator.extra_args[operator.extra_args.index("--webhook-port") + 1]
    urls = {hook["name"]: hook["clientConfig"]["url"] for hook in mutating["webhooks"] + validating["webhooks"]}
    assert urls == {"pods.mutate.gputenant.io": f"https://127.0.0.1:{port}/mutate-pod",
                    "pods.validate.gputenant.io": f"https://127.0.0.1:{port}/validate-pod",
                    "services.validate.gputenant.io": f"https://127.0.0.1:{port}/validate-service",
                    "gputenants.validate.gputenant.io": f"https://127.0.0.1:{port}/validate-tenant"}
    assert all(hook["clientConfig"]["caBundle"] for hook in mutating["webhooks"] + validating["webhooks"])
    assert [hook["failurePolicy"] for hook in mutating["webhooks"]] == ["Fail"]


def test_the_operator_serves_the_crds_conversion_on_its_own_port(plane, operator, guarded_tenant):
    """The guard points the GpuTenant CRD's conversion webhook at its conversion port, with the CA
    bundle of its admission webhooks, and the API server converts the stored v1alpha1 tenant to
    v1beta1 through it (the API server presents no client certificate there)."""
    (mutating, _), _ = guarded_tenant
    port = operator.extra_args[operator.extra_args.index("--webhook-conversion-port") + 1]
    crd = plane.kubectl("get", "crd", "gputenants.gputenant.io", "-o", "json")
    client_config = json.loads(crd.stdout)["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client_config == {"url": f"https://127.0.0.1:{port}/convert",
                             "caBundle": mutating["webhooks"][0]["clientConfig"]["caBundle"]}
    stored = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)
    served = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)
    assert served["apiVersion"] == "gputenant.io/v1beta1" and served["spec"] == stored["spec"]
    assert served["metadata"]["uid"] == stored["metadata"]["uid"]


def test_the_vcluster_control_plane_pod_is_admitted_under_the_guard(plane, guarded_tenant):
    """The statefulset controller's pod came after the configurations and is stored as the chart
    wrote it but for NET_RAW, which the guard drops from every container: it asks for no GPU, so the
    guard neither steers nor refuses it."""
    (mutating, _), _ = guarded_tenant
    selector = ",".join(f"{k}={v}" for k, v in naming.vcluster_pod_labels(TENANT).items())
    with plane.api_client() as client:
        pods = client.sanitize_for_serialization(
            kubernetes.client.CoreV1Api(client).list_namespaced_pod(NAMESPACE, label_selector=selector).items)
    [pod] = pods
    assert [ref["kind"] for ref in pod["metadata"]["ownerReferences"]] == ["StatefulSet"]
    assert pod["metadata"]["creationTimestamp"] >= mutating["metadata"]["creationTimestamp"]
    assert QUEUE not in pod["metadata"]["labels"]
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert all(drops_spoofing(container) for container in pod["spec"]["containers"]), "no raw sockets"


def test_a_tenant_gpu_pod_is_put_on_its_queue_scheduler_and_pool(plane, guarded_tenant):
    _, user = guarded_tenant
    stored = create_pod(plane, NAMESPACE, GPU_POD, user)
    assert stored["metadata"]["labels"] == {QUEUE: TENANT}
    assert stored["spec"]["schedulerName"] == "kai-scheduler"
    assert stored["spec"]["nodeSelector"] == {"gputenant.io/pool": "a100-timeslice",
                                              "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in stored["spec"]["tolerations"]


def test_the_guard_logs_no_line_per_review(operator, plane, guarded_tenant):
    """Per-review lines (kopf's handler outcome, aiohttp's access log) cost the guard's CPU on every
    tenant pod; its decisions are counted in the metrics instead."""
    _, user = guarded_tenant
    create_pod(plane, NAMESPACE, GPU_POD, user)
    log = operator.log_path.read_text(errors="replace")
    assert "/mutate-pod" not in log and "/validate-pod" not in log
    assert "Handler 'mutate-pod' succeeded" not in log


def test_a_pod_on_another_queue_is_refused_with_the_guards_message(plane, guarded_tenant):
    _, user = guarded_tenant
    foreign = {**GPU_POD, "metadata": {**GPU_POD["metadata"], "labels": {QUEUE: "other-team"}}}
    with pytest.raises(ApiException) as refused:
        create_pod(plane, NAMESPACE, foreign, user)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        'admission webhook "pods.validate.gputenant.io" denied the request: [queue-label] label '
        f"{QUEUE}=other-team names another queue; pods of this tenant use queue {TENANT} (remove the label) ({POLICY})")


def test_a_pod_in_a_namespace_of_no_tenant_passes_untouched(plane, guarded_tenant):
    namespace = f"{TENANT}-elsewhere"
    plane.create_namespace(namespace)
    try:
        foreign = {**GPU_POD, "metadata": {**GPU_POD["metadata"], "labels": {QUEUE: "other-team"}}}
        stored = create_pod(plane, namespace, foreign)
        assert stored["metadata"]["labels"] == {QUEUE: "other-team"}
        assert stored["spec"]["schedulerName"] == "default-scheduler"
        assert "nodeSelector" not in stored["spec"]
    finally:
        with plane.api_client() as client:
            kubernetes.client.CoreV1Api(client).delete_namespace(namespace)
