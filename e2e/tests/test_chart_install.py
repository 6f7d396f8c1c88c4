"""The Helm chart against a real kube-apiserver: its objects pass server-side dry-run, and its
least-privilege RBAC is proven both ways with the operator running as the chart's ServiceAccount
(a TokenRequest token): three tenants get every part up to their vCluster and are deleted
cleanly, and the same identity is refused what it must not do.

The RBAC tests use a plane of their own: the operator here watches every GpuTenant in the cluster,
and on the session's planes it would fight the cluster-admin operator other tests start. That
plane has no node, so the REAL vCluster chart (../shared/third_party) is installed but its pod
stays Pending: tenants stop at VClusterReady=False/ControlPlaneStarting, which is what this
module waits for. A running vCluster is test_vcluster_real_operator.py's; Helm, RBAC, admission,
quotas and namespace deletion are real.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant.api import conditions as reasons
from gputenant.config.pools import Pool
from gputenant.reconcile.steps.namespace import access_review
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART, chart_operator_access, install_kai_queue_crd
from kubeplane.gpu_nodes import create_nodes, gpu_node
from kubeplane.kwok import Kwok
from kubeplane.operator_process import OperatorProcess, guard_flags, wait_for_guard

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "config.yaml"
RELEASE = NAMESPACE = FULLNAME = "gpu-tenant-operator"
CHART_DRIFT_ENV = {"GPUTENANT_WATCH_OWNED": "true", "GPUTENANT_WATCH_OWNED_SECRETS": "false"}
"""What the chart's Deployment sets by default (values drift.watch, drift.watchSecrets)."""
INSTALL_DOC = REPO_ROOT / "docs" / "install.md"
TESTED_MARKER = "<!-- tested: e2e/tests/test_chart_install.py"
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
TENANTS = {"rbac-a": "Trusted", "rbac-b": "Internal", "rbac-c": "Untrusted"}
UNPOOLED = Pool.model_validate({"name": "unpooled", "mode": "Exclusive", "gpuModel": "A100-80GB",
                                "gpuMemoryMiB": 81920, "nodeSelector": {"rbac-test": "unpooled"}})
"""The shape of a GPU node no pool of the example config selects, so the operator's pools loop
leaves it alone while the test checks what the chart's ServiceAccount may do to it."""


def chart_values(tmp_path: Path) -> Path:
    """examples/config.yaml as the chart's `config`, with the vcluster chart from ../shared."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for set_by_chart in ("operatorNamespace", "operatorServiceAccount", "tenantNamespaceClusterRole"):
        config.pop(set_by_chart, None)
    config["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART))
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def ensure_namespace(plane: ControlPlane, name: str) -> None:
    try:
        plane.create_namespace(name)
    except ApiException as error:
        if error.status != 409:
            raise


def test_rendered_chart_passes_server_side_dry_run(plane, tmp_path):
    ensure_namespace(plane, NAMESPACE)
    ensure_namespace(plane, "gpu-operator")
    rendered = plane.helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                          "--values", str(chart_values(tmp_path))).stdout
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered) if doc}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    # The CRD as a whole object, as Helm writes it: a server-side apply would merge it with the live
    # CRD's conversion clientConfig (a `url` this process's webhook set), and url with service is invalid.
    [crd] = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    exists = plane.kubectl("get", "crd", crd["metadata"]["name"], check=False).returncode == 0
    checked = plane.kubectl("replace" if exists else "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(crd))
    result = plane.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", "-",
                           input=yaml.safe_dump_all([d for d in documents if d is not crd]))
    assert (checked.stdout + result.stdout).count("(server dry run)") == len(documents)


# -- the chart installed on a plane of its own, the operator running as its ServiceAccount -------

@pytest.fixture(scope="module")
def rbac_plane():
    """With kwok, for the SIMULATED GPU node the operator must not touch."""
    with ControlPlane(audit=True) as own_plane, Kwok().start(own_plane):
        yield own_plane


def documented_install_commands() -> str:
    """The shell block docs/install.md marks as tested."""
    text = INSTALL_DOC.read_text()
    after_marker = text[text.index(TESTED_MARKER):]
    start = after_marker.index("```sh\n") + len("```sh\n")
    return after_marker[start:after_marker.index("```", start)]


@pytest.fixture(scope="module")
def installed(rbac_plane, tmp_path_factory):
    """The chart installed by running docs/install.md's commands (with my-values.yaml made from
    examples/config.yaml); returns the operator's token kubeconfig and its config file (the
    ConfigMap the chart rendered, as the pod would mount it)."""
    tmp = tmp_path_factory.mktemp("chart")
    ensure_namespace(rbac_plane, "gpu-operator")  # the GPU Operator's namespace, a prerequisite
    install_kai_queue_crd(rbac_plane)
    chart_values(tmp).rename(tmp / "my-values.yaml")
    (tmp / "charts").symlink_to(REPO_ROOT / "charts")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_install_commands()], cwd=tmp,
                            env=rbac_plane.env(), capture_output=True, text=True)
    assert result.returncode == 0, f"docs/install.md commands failed:\n{result.stdout}\n{result.stderr}"
    assert "gputenants.gputenant.io" in result.stdout and f"deployment.apps/{FULLNAME}" in result.stdout
    token_kubeconfig, config_path = chart_operator_access(rbac_plane, FULLNAME, NAMESPACE, tmp)
    wait_for_scope_policy(rbac_plane, token_kubeconfig)
    return token_kubeconfig, config_path


def wait_for_scope_policy(plane: ControlPlane, token_kubeconfig: Path) -> None:
    """The API server loads a new ValidatingAdmissionPolicy asynchronously; a dry-run request the
    policy must refuse tells when it is in force."""
    with plane.api_client(token_kubeconfig) as client:
        core = kubernetes.client.CoreV1Api(client)
        probe = {"metadata": {"name": "scope-probe", "labels": {"app.kubernetes.io/managed-by": "gpu-tenant-operator"}}}
        wait_for(lambda: status_of(lambda: core.create_namespace(probe, dry_run="All"))[0] == 403,
                 timeout=30, interval=0.2, what="the scope ValidatingAdmissionPolicy to be in force")


@pytest.fixture(scope="module")
def operator_as_service_account(rbac_plane, installed, tmp_path_factory):
    """`gputenant run` as the chart's Deployment runs it (admission guard and GPU pools included),
    but on loopback and with the ServiceAccount's token."""
    token_kubeconfig, config_path = installed
    running = OperatorProcess(rbac_plane, config_path, rbac_plane.log_dir / "operator-as-service-account.log",
                              guard_flags(tmp_path_factory.mktemp("guard-certs")), env=CHART_DRIFT_ENV, resync_seconds=5,
                              kubeconfig_path=token_kubeconfig, liveness=True).start()
    try:
        wait_for_guard(rbac_plane, running)  # the chart's CRD names a Service no pod backs here
        yield running.liveness_url, running.log_path
    finally:
        running.stop()


def custom_objects(plane: ControlPlane, kubeconfig_path=None):
    return kubernetes.client.CustomObjectsApi(plane.api_client(kubeconfig_path))


def gpu_tenant(plane: ControlPlane, name: str) -> dict | None:
    return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)


APPLIED_PARTS = (reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY, reasons.NETWORK_READY,
                 reasons.QUEUE_READY, reasons.SHARING_READY)


def up_to_the_vcluster(body: dict | None) -> bool:
    """Every part before the vCluster applied at the current generation, and the vCluster
    installed and waiting for its control plane (its pod stays Pending on this node-less plane)."""
    status = (body or {}).get("status") or {}
    found = {c["type"]: c for c in status.get("conditions") or []}
    return (status.get("observedGeneration") == body["metadata"]["generation"]
            and all(found.get(part, {}).get("status") == "True" for part in APPLIED_PARTS)
            and found.get(reasons.VCLUSTER_READY, {}).get("reason") == reasons.CONTROL_PLANE_STARTING)


class RefusedByChartRbac(AssertionError):
    """The operator reported a 403 from the API server: the chart's RBAC does not cover something
    its code does."""


def applied_or_forbidden(body: dict | None) -> bool:
    """`up_to_the_vcluster`; a condition quoting a 403 fails at once (it is not retried into
    success)."""
    for condition in ((body or {}).get("status") or {}).get("conditions") or []:
        message = condition.get("message", "")
        if condition["status"] == "False" and ("403 Forbidden" in message or "is forbidden" in message):
            raise RefusedByChartRbac(f"{body['metadata']['name']}: {condition['type']}: {condition['message']}")
    return up_to_the_vcluster(body)


def log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_operator_as_the_chart_service_account_serves_three_tenants_and_deletes_them(
        rbac_plane, operator_as_service_account):
    liveness_url, log_path = operator_as_service_account
    offset = rbac_plane.audit_offset()
    tenants = [{"apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "metadata": {"name": name},
                "spec": {"trust": trust, "owners": [{"kind": "User", "name": f"{name}-owner"}],
                         "gpu": {"quota": 1}}} for name, trust in TENANTS.items()]
    rbac_plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                       input=yaml.safe_dump_all(tenants))
    for name in TENANTS:
        try:
            wait_for(lambda name=name: applied_or_forbidden(gpu_tenant(rbac_plane, name)), timeout=240,
                     interval=0.5, what=f"GpuTenant {name} up to its vCluster")
        except TimeoutError:
            raise AssertionError(f"{name} not applied: {(gpu_tenant(rbac_plane, name) or {}).get('status')}\n"
                                 f"operator log:\n{log_tail(log_path)}") from None
    wait_for(lambda: urllib.request.urlopen(liveness_url, timeout=5).status == 200, timeout=30,
             what="the liveness endpoint")
    logged = log_path.read_text(errors="replace")
    refused = [line for line in logged.splitlines() if "watch failed" in line and "403" in line]
    assert not refused, "the chart's RBAC does not cover an owned-kind watch:\n" + "\n".join(refused)
    for kind in ("ConfigMap", "ResourceQuota", "LimitRange", "Role", "RoleBinding", "NetworkPolicy", "Namespace"):
        assert f"watching {kind} " in logged, f"no {kind} watch under the chart's RBAC"

    def pools_report() -> dict:
        with urllib.request.urlopen(liveness_url, timeout=5) as answer:
            return json.load(answer)["pools"]
    # The pool report on the liveness endpoint follows the tenants within a resync period.
    pools = wait_for(lambda: (lambda found: found if found["a100-timeslice"]["tenants"] else None)(pools_report()),
                     timeout=30, what="the pool report to show the Trusted tenant")
    assert set(pools) == {pool["name"] for pool in yaml.safe_load(EXAMPLE_CONFIG.read_text())["pools"]}
    assert pools["a100-timeslice"]["tenants"] == ["rbac-a"] and pools["a100-timeslice"]["granted"] == 1
    with rbac_plane.api_client() as client:
        rbac_api = kubernetes.client.RbacAuthorizationV1Api(client)
        for name in TENANTS:
            binding = rbac_api.read_namespaced_role_binding("gpu-tenant-operator", f"tenant-{name}")
            assert binding.role_ref.name == f"{FULLNAME}-tenant-namespace"
            assert [(s.name, s.namespace) for s in binding.subjects] == [(FULLNAME, NAMESPACE)]
        # The GPU pools loop ran under the same identity: the time-slicing pools' device-plugin
        # config, in the one namespace the chart grants it.
        device_plugin = kubernetes.client.CoreV1Api(client).read_namespaced_config_map(
            "gputenant-device-plugin-config", "gpu-operator")
        assert device_plugin.metadata.managed_fields[0].manager == "gpu-tenant-operator"
        # The admission guard registered itself under the same identity, and the vCluster pods
        # (created after it) were admitted.
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        assert admission.read_validating_webhook_configuration("gputenant-guard").webhooks[0].client_config.url \
            .startswith("https://127.0.0.1:")
    operator_log = log_path.read_text(errors="replace")
    assert "GPU pools not applied" not in operator_log
    assert "webhook configurations updated" in operator_log

    rbac_plane.kubectl("delete", "gputenants", *TENANTS, "--wait=false")
    with rbac_plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)

        def gone() -> bool:
            namespaces = {n.metadata.name for n in core.list_namespace().items}
            return not any(gpu_tenant(rbac_plane, n) or f"tenant-{n}" in namespaces for n in TENANTS)
        try:
            wait_for(gone, timeout=180, interval=1, what="tenants and their namespaces to be deleted")
        except TimeoutError:
            raise AssertionError(f"not deleted; operator log:\n{log_tail(log_path)}") from None
    queues = custom_objects(rbac_plane).list_cluster_custom_object("scheduling.run.ai", "v2", "queues")["items"]
    assert not {q["metadata"]["name"] for q in queues} & set(TENANTS)
    # The work was done by the chart's ServiceAccount, not by an administrator.
    assert rbac_plane.count_requests(offset, user=OPERATOR_USER) > 0
    assert rbac_plane.count_requests(offset, user=OPERATOR_USER, verbs=None, user_agent="gpu-tenant-operator") > 0


def status_of(call) -> tuple[int, str]:
    try:
        call()
    except ApiException as error:
        return error.status, error.body or ""
    return 200, ""


def test_the_chart_service_account_is_refused_what_it_must_not_do(rbac_plane, installed):
    token_kubeconfig, _ = installed
    with rbac_plane.api_client() as admin:
        admin_core = kubernetes.client.CoreV1Api(admin)
        admin_core.create_namespaced_secret("kube-system", {"metadata": {"name": "not-the-operators"},
                                                            "stringData": {"key": "value"}})
        create_nodes(admin, [gpu_node("gpu-node-rbac", UNPOOLED, gpus=8)])
    rbac = kubernetes.client.RbacAuthorizationV1Api
    with rbac_plane.api_client(token_kubeconfig) as client:
        core = kubernetes.client.CoreV1Api(client)
        refused = {
            "read a Secret in kube-system": lambda: core.read_namespaced_secret("not-the-operators", "kube-system"),
            "list Secrets in every namespace": lambda: core.list_secret_for_all_namespaces(),
            "delete a node": lambda: core.delete_node("gpu-node-rbac"),
            "change a node's status": lambda: core.patch_node_status("gpu-node-rbac", {
                "status": {"capacity": {"nvidia.com/gpu": "64"}}}),
            "read a webhook configuration not its own": lambda: kubernetes.client.AdmissionregistrationV1Api(
                client).read_validating_webhook_configuration("someone-elses"),
            "create a pod in default": lambda: core.create_namespaced_pod("default", {
                "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            "bind itself to cluster-admin": lambda: rbac(client).create_cluster_role_binding({
                "metadata": {"name": "operator-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]}),
            "bind itself to the tenant-namespace role in kube-system": lambda: rbac(client).create_namespaced_role_binding(
                "kube-system", {
                    "metadata": {"name": "operator-here"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": f"{FULLNAME}-tenant-namespace"},
                    "subjects": [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]}),
            "label kube-system as a tenant namespace": lambda: core.patch_namespace("kube-system", {
                "metadata": {"labels": {"app.kubernetes.io/managed-by": "gpu-tenant-operator"}}}),
            "create a namespace outside the tenant prefix": lambda: core.create_namespace({
                "metadata": {"name": "not-a-tenant", "labels": {"app.kubernetes.io/managed-by": "gpu-tenant-operator"}}}),
        }
        outcomes = {what: status_of(call) for what, call in refused.items()}
    assert {what: status for what, (status, _) in outcomes.items()} == {what: 403 for what in refused}
    assert "may only create or change RoleBindings" in outcomes["bind itself to the tenant-namespace role in kube-system"][1]
    assert "may only change or delete namespaces" in outcomes["label kube-system as a tenant namespace"][1]
    with rbac_plane.api_client(token_kubeconfig) as client:
        allowed = status_of(lambda: kubernetes.client.CoreV1Api(client).create_namespace({
            "metadata": {"name": "tenant-allowed", "labels": {"app.kubernetes.io/managed-by": "gpu-tenant-operator"}}}))
    assert allowed[0] == 200, allowed


def test_the_access_review_is_refused_until_the_operators_rolebinding_is_in_force(rbac_plane, installed):
    """The operator waits for its new RoleBinding with a review only that binding can allow. The
    chart's cluster-wide role grants list and watch on ResourceQuotas (drift repair), so a `list`
    review passed at once and CI saw the quota's first PATCH refused (403) on a brand-new tenant."""
    token_kubeconfig, _ = installed
    namespace = "tenant-access-review"
    ensure_namespace(rbac_plane, namespace)
    authorization = kubernetes.client.AuthorizationV1Api

    def allowed() -> bool:
        with rbac_plane.api_client(token_kubeconfig) as client:
            return bool(authorization(client).create_self_subject_access_review(access_review(namespace)).status.allowed)

    try:
        assert not allowed()
        with rbac_plane.api_client() as admin:
            kubernetes.client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, {
                "metadata": {"name": "gpu-tenant-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": f"{FULLNAME}-tenant-namespace"},
                "subjects": [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]})
        wait_for(allowed, timeout=30, interval=0.2, what="the access review allowed once the RoleBinding exists")
    finally:
        rbac_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
