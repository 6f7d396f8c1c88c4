"""The operator, installed by its Helm chart and running as the chart's ServiceAccount, installs the
REAL vCluster chart (0.36.1: ../shared/third_party's, or the one `make tools` made from the vCluster Go
module, kubeplane.vcluster_chart; never copied into the project) for every example tenant;
then `helm uninstall` of the operator leaves the tenants' namespaces usable.

Issue 10 found that this identity could not install a single real vCluster: Helm was refused the
chart's Role (it grants `pods/resize` and `events.k8s.io` events create, which the operator's
tenant-namespace ClusterRole lacked), and the operator retried that refusal forever. Issue 17 found
that after `helm uninstall` the guard's fail-closed webhook configurations stayed and blocked every
pod in every tenant namespace.

No container runs here (no node, no simulator): the vCluster pod is created by the real
statefulset controller, admitted through the guard, and stays Pending, so tenants stop at
VClusterReady=False/ControlPlaneStarting. What this module checks is everything up to that: the
Helm release deployed at revision 1 by the ServiceAccount, RBAC and admission real. The rest of
issue 10 (a running vCluster) needs the real node.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART, chart_operator_access, install_kai_queue_crd
from kubeplane.operator_process import OperatorProcess, guard_flags, wait_for_guard

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "config.yaml"
EXAMPLE_TENANTS = sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))
RELEASE = NAMESPACE = FULLNAME = "gpu-tenant-operator"
CHART_DRIFT_ENV = {"GPUTENANT_WATCH_OWNED": "true", "GPUTENANT_WATCH_OWNED_SECRETS": "false"}
"""What the chart's Deployment sets by default (values drift.watch, drift.watchSecrets)."""
GUARD_CONFIGURATION = "gputenant-guard"
WRONG_POOL_TENANT = "wrong-pool"
HELM_REFUSALS = {"HelmForbidden", "HelmAdmissionDenied", "HelmFailed", "InvalidValues"}

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"the real vCluster chart is absent at {REAL_VCLUSTER_CHART}")


def example_tenants() -> list[dict]:
    return [doc for path in EXAMPLE_TENANTS for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def own_plane():
    """A plane of its own: this operator watches every GpuTenant, and the uninstall at the end
    must not take away a guard other modules rely on."""
    with ControlPlane() as plane:
        yield plane


@pytest.fixture(scope="module")
def installed(own_plane, tmp_path_factory):
    """The operator chart installed with examples/config.yaml pointing at the real vCluster chart;
    returns the ServiceAccount's token kubeconfig and the config the chart rendered."""
    tmp = tmp_path_factory.mktemp("real-chart")
    own_plane.create_namespace("gpu-operator")
    install_kai_queue_crd(own_plane)
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for set_by_chart in ("operatorNamespace", "operatorServiceAccount", "tenantNamespaceClusterRole"):
        config.pop(set_by_chart, None)
    chart_version = yaml.safe_load((REAL_VCLUSTER_CHART / "Chart.yaml").read_text())["version"]
    config["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART), version=chart_version)
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump({"config": config}))
    own_plane.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                   "--values", str(values))
    return chart_operator_access(own_plane, FULLNAME, NAMESPACE, tmp)


@pytest.fixture(scope="module")
def operator(own_plane, installed, tmp_path_factory):
    """`gputenant run` as the chart's Deployment runs it, on loopback, with the ServiceAccount's
    token; yields (liveness URL, log path, the OperatorProcess)."""
    token_kubeconfig, config_path = installed
    running = OperatorProcess(own_plane, config_path, own_plane.log_dir / "operator-real-chart.log",
                              guard_flags(tmp_path_factory.mktemp("guard-certs")), env=CHART_DRIFT_ENV, resync_seconds=5,
                              deletion_retry_seconds=None, kubeconfig_path=token_kubeconfig, liveness=True).start()
    try:
        # As the chart's readiness probe waits for the guard: its webhook configurations registered
        # and the CRD's conversion pointed at it (the chart's CRD names a Service no pod backs here).
        wait_for_guard(own_plane, running)
        yield running.liveness_url, running.log_path, running
    finally:
        running.stop()


def tenant(plane: ControlPlane, name: str) -> dict | None:
    return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)


def conditions(body: dict | None) -> dict[str, dict]:
    return {c["type"]: c for c in ((body or {}).get("status") or {}).get("conditions") or []}


def release_deployed(plane: ControlPlane, name: str) -> dict | None:
    """The release's `helm status` once deployed; a refusal in the tenant's conditions fails at
    once (it is permanent, not retried into success)."""
    for found in conditions(tenant(plane, name)).values():
        if found["status"] == "False" and (found["reason"] in HELM_REFUSALS or "forbidden" in found["message"]):
            raise AssertionError(f"{name}: {found['type']} {found['reason']}: {found['message']}")
    result = plane.helm("status", name, "--namespace", f"tenant-{name}", "--output", "json", check=False)
    if result.returncode:
        return None
    status = json.loads(result.stdout)
    return status if status["info"]["status"] == "deployed" else None


def test_the_service_account_installs_the_real_vcluster_chart_for_every_example_tenant(own_plane, operator):
    liveness, log_path, _ = operator
    tenants = example_tenants()
    wrong_pool = {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": WRONG_POOL_TENANT},
                  "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "someone"}],
                           "gpu": {"quota": 1, "pool": "l4-hami"}, "sharing": {"mode": "TimeSlicing"}}}
    own_plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                      input=yaml.safe_dump_all([*tenants, wrong_pool]))
    for body in tenants:
        name = body["metadata"]["name"]
        try:
            wait_for(lambda name=name: release_deployed(own_plane, name), timeout=240, interval=1,
                     what=f"the vCluster release of {name} deployed")
        except TimeoutError:
            raise AssertionError(f"{name}: {(tenant(own_plane, name) or {}).get('status')}\noperator log:\n"
                                 + "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])) from None
        history = json.loads(own_plane.helm("history", name, "--namespace", f"tenant-{name}", "--output", "json").stdout)
        assert [(h["revision"], h["status"], h["chart"]) for h in history] == [(1, "deployed", "vcluster-0.36.1")], history
    with own_plane.api_client() as client:
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for body in tenants:
            name = body["metadata"]["name"]
            role = rbac.read_namespaced_role(f"vc-{name}", f"tenant-{name}")
            granted = {(group, resource) for rule in role.rules for group in rule.api_groups for resource in rule.resources}
            assert {("", "pods/resize"), ("events.k8s.io", "events")} <= granted
    # The refused tenant: Ready=False with the policy's reason, and no grant in the pool report.
    wrong = wait_for(lambda: (lambda body: body if conditions(body).get("Ready", {}).get("reason") == "PoolModeMismatch"
                              else None)(tenant(own_plane, WRONG_POOL_TENANT)),
                     timeout=60, what="the wrong-pool tenant refused")
    assert conditions(wrong)["Ready"]["status"] == "False"

    def pools() -> dict | None:
        with urllib.request.urlopen(liveness, timeout=5) as answer:
            found = json.load(answer).get("pools") or {}
        return found if found.get("l4-hami", {}).get("tenants") else None
    report = wait_for(pools, timeout=60, what="the pool report to show recsys on l4-hami")
    assert report["l4-hami"]["tenants"] == ["recsys"] and report["l4-hami"]["granted"] == 2


def test_helm_uninstall_of_the_operator_removes_the_guard_so_tenant_pods_are_admitted(own_plane, operator):
    _, _, running = operator
    admission = kubernetes.client.AdmissionregistrationV1Api(own_plane.api_client())
    owners = admission.read_validating_webhook_configuration(GUARD_CONFIGURATION).metadata.owner_references
    assert [(o.kind, o.name) for o in owners] == [("ClusterRole", f"{FULLNAME}-tenant-namespace")]
    running.stop()
    namespace = "tenant-ml-platform"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-uninstall"},
           "spec": {"containers": [{
               "name": "c", "image": "busybox",
               "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}},
               "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
                                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}]}}
    core = kubernetes.client.CoreV1Api(own_plane.api_client())
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    assert "gputenant" in refused.value.body, "the stopped operator's fail-closed guard should refuse first"

    own_plane.helm("uninstall", RELEASE, "--namespace", NAMESPACE)

    def guard_gone() -> bool:
        names = [c.metadata.name for c in admission.list_validating_webhook_configuration().items]
        names += [c.metadata.name for c in admission.list_mutating_webhook_configuration().items]
        return GUARD_CONFIGURATION not in names
    wait_for(guard_gone, timeout=60, interval=0.5, what="the garbage collector to delete the guard's configurations")
    created = core.create_namespaced_pod(namespace, pod)
    assert created.metadata.name == "after-uninstall"
    # What uninstall leaves (docs/install.md): the CRD, the GpuTenants and their namespaces.
    assert tenant(own_plane, "ml-platform") is not None
    assert core.read_namespace(namespace).metadata.labels["gputenant.io/tenant"] == "ml-platform"
