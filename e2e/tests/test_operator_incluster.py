"""The operator in-cluster, from its own chart, on the plane's real node: its image built here from
Debian packages plus the project's wheel (kubeplane.operator_image, the Dockerfile's recipe without
a container engine), `helm install charts/gpu-tenant-operator`, the Deployment available, the
kubelet-mounted ServiceAccount token the operator's identity, and its admission guard reached by
the API server through the chart's Service (kubeplane.service_routes says how the host gets there).
No vCluster runs here: the chart's default configuration names charts.loft.sh, which is not
reachable, so the tenant stays not Ready; its host namespace is what the guard needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
import pytest

from kubeplane import wait_for
from kubeplane.images import TEST_IMAGE
from kubeplane.incluster import RELEASE, InClusterOperator
from kubeplane.operator_image import CMD, ENTRYPOINT, ENV, GROUP_ENTRY, PASSWD_ENTRY, USER

pytestmark = pytest.mark.plane

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "gputenant-system"
TENANT = "incluster"
TENANT_NAMESPACE = f"tenant-{TENANT}"
UNCLAIMED_NAMESPACE = "tenant-unclaimed"

SELF_SUBJECT_REVIEW = """
import json, kubernetes
kubernetes.config.load_incluster_config()
with kubernetes.client.ApiClient() as client:
    review = kubernetes.client.AuthenticationV1Api(client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    print(json.dumps(client.sanitize_for_serialization(review.status.user_info)))
"""


@pytest.fixture(scope="module")
def incluster(vcluster_node, tmp_path_factory):
    operator = InClusterOperator(vcluster_node, NAMESPACE, values={"replicas": 1})
    try:
        yield operator.install(tmp_path_factory.mktemp("incluster"))
    finally:
        # Offboarded by the operator before it goes, so no finalizer outlives it on the session plane.
        vcluster_node.kubectl("delete", "gputenant", TENANT, "--ignore-not-found", "--timeout=120s", check=False)
        operator.uninstall()
        vcluster_node.kubectl("delete", "namespace", UNCLAIMED_NAMESPACE, "--ignore-not-found", "--wait=false",
                              check=False)


def test_the_dockerfile_and_the_local_image_start_the_same_way():
    """The local image is the Dockerfile's recipe without a container engine: same entrypoint,
    command, environment and user."""
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert f"ENTRYPOINT {json.dumps(ENTRYPOINT)}" in dockerfile
    assert f"CMD {json.dumps(CMD)}" in dockerfile
    assert f"USER {USER}" in dockerfile
    assert f"echo '{PASSWD_ENTRY}' >> /etc/passwd" in dockerfile and f"echo '{GROUP_ENTRY}' >> /etc/group" in dockerfile
    assert "PATH=/opt/gputenant/bin:$PATH" in dockerfile and "HOME=/tmp" in dockerfile
    assert any(entry.startswith("PATH=/opt/gputenant/bin:") for entry in ENV)


def test_the_deployment_runs_the_operator_as_its_service_account(incluster, vcluster_node):
    [pod] = incluster.pods()
    assert pod.status.phase == "Running" and pod.spec.service_account_name == RELEASE
    assert pod.spec.containers[0].image == "gpu-tenant-operator:0.3.0"
    result = vcluster_node.kubectl("exec", "-n", NAMESPACE, pod.metadata.name, "--", "python3", "-c",
                                   SELF_SUBJECT_REVIEW)
    assert json.loads(result.stdout)["username"] == incluster.service_account
    # The operator's own requests carry the same identity (its list before watching GpuTenants;
    # the audit log records a watch only once it ends).
    wait_for(lambda: any(event.get("user", {}).get("username") == incluster.service_account
                         and event["verb"] == "list" and "/gputenants" in event.get("requestURI", "")
                         for event in vcluster_node.audit_events()),
             timeout=30, interval=1, what="the operator's GpuTenant list in the audit log")


def test_the_guard_is_reached_through_the_charts_service(incluster, vcluster_node):
    with vcluster_node.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        hooks = admission.read_validating_webhook_configuration("gputenant-guard").webhooks
    services = {hook.name: (hook.client_config.service.name, hook.client_config.service.port) for hook in hooks}
    assert set(services.values()) == {(f"{RELEASE}-guard", 9443)}
    assert all(hook.client_config.url is None for hook in hooks)


def cpu_pod(name: str) -> dict:
    """A pod any trust level's Pod Security admits, asking for no GPU."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "main", "image": TEST_IMAGE, "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                   "limits": {"cpu": "100m", "memory": "32Mi"}},
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def test_a_tenant_pod_is_admitted_and_an_unclaimed_namespace_refused_by_the_guard(incluster, vcluster_node):
    vcluster_node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": TENANT},
        "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}], "gpu": {"quota": 1}}}))
    vcluster_node.create_namespace(UNCLAIMED_NAMESPACE, labels={"gputenant.io/tenant": "nobody"})
    with vcluster_node.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        with pytest.raises(kubernetes.client.ApiException) as refused:
            core.create_namespaced_pod(UNCLAIMED_NAMESPACE, cpu_pod("stray"), dry_run="All")
        assert "not the host namespace of any GpuTenant" in refused.value.body

        def admitted():
            try:
                return core.create_namespaced_pod(TENANT_NAMESPACE, cpu_pod("probe"), dry_run="All")
            except kubernetes.client.ApiException as error:
                if error.status == 404 or "not the host namespace" in (error.body or ""):
                    return None  # the operator has not created the namespace, or the guard not indexed it
                raise
        try:
            pod = wait_for(admitted, timeout=90, interval=1, what=f"a pod admitted in {TENANT_NAMESPACE}")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{incluster.describe()}") from None
    assert pod.metadata.namespace == TENANT_NAMESPACE


def test_the_crds_conversion_is_answered_through_the_charts_service(incluster, vcluster_node):
    """The operator points the GpuTenant CRD's conversion webhook at its Service's conversion port
    with its CA bundle; the API server reaches it there past the chart's NetworkPolicy, without a
    client certificate, and reads the stored v1alpha1 tenant as v1beta1."""
    def client_config():
        crd = json.loads(vcluster_node.kubectl("get", "crd", "gputenants.gputenant.io", "-o", "json").stdout)
        config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
        return config if config.get("service") and config.get("caBundle") else None

    config = wait_for(client_config, timeout=60, interval=1, what="the operator to point the CRD at its Service")
    assert config["service"] == {"namespace": NAMESPACE, "name": f"{RELEASE}-guard", "port": 9444, "path": "/convert"}
    stored = vcluster_node.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)
    def as_v1beta1():
        try:
            return vcluster_node.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)
        except kubernetes.client.ApiException as error:
            if error.status == 500 and "conversion webhook" in (error.body or ""):
                return None  # the API server has not yet picked up the new CA bundle
            raise

    served = wait_for(as_v1beta1, timeout=60, interval=1, what="the tenant read as v1beta1")
    assert served["apiVersion"] == "gputenant.io/v1beta1" and served["metadata"]["uid"] == stored["metadata"]["uid"]
