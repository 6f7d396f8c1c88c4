"""Attacks on the tenant API and on pod identity, against a real kube-apiserver (issue 12, classes 3,
5-8 as far as they are the tenant API's): every case is refused naming the field, or neutralised.

The chart's ValidatingAdmissionPolicies (templates/admission-policies.yaml, rendered by the pinned
helm) are applied to the plane for this module and removed after it:
- a platform user deleting a GpuTenant with spec.preventDeletion is refused, one by one or as a
  collection; clearing the field lets the delete through;
- with an empty namespacePrefix, a GpuTenant aimed at a system namespace or the operator's is refused;
- the tenant's syncer identity (RBAC on pods and pods/status in its host namespace, as vCluster's
  has) cannot rewrite identity, queue, pool or GPU-share keys through pods/status.
The GpuTenant webhook's checks (gputenant.guard.tenant_admission) run here with a real client
against real namespaces, KAI Queues, GpuTenants and pods. No kubelet runs: pods stay Pending,
which the trust check counts as running (they will run).
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant import GROUP, PLURAL, naming
from gputenant.api.group import HUB_VERSION as VERSION  # the bodies here are the hub's (v1alpha1) shape
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard.tenant_admission import ALLOW_TRUST_CHANGE_ANNOTATION, tenant_api_problems
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.render import render_tenant
from kubeplane import ControlPlane, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
OPERATOR_NAMESPACE = CONFIG.operator_namespace
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
SYNCER = "tenant-syncer"
"""The identity the tenant's synced pods arrive with: vCluster's syncer may write pods and
pods/status in its host namespace, nothing else."""


def short_id() -> str:
    return uuid.uuid4().hex[:6]


def chart_policies(plane: ControlPlane, release: str, *values: str) -> list[dict]:
    rendered = plane.helm("template", release, str(CHART), "--namespace", OPERATOR_NAMESPACE, *values,
                          "--show-only", "templates/admission-policies.yaml").stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def tenant_body(name: str, trust: str = "Untrusted", **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": trust, "owners": [{"kind": "User", "name": "owner"}], **spec}}


def refusal(call) -> tuple[int, str]:
    """Status and message of the API server's refusal; fails the test if it accepted."""
    with pytest.raises(ApiException) as raised:
        call()
        pytest.fail("the API server accepted the request")
    return raised.value.status, json.loads(raised.value.body)["message"]


@pytest.fixture(scope="module")
def custom(plane, crds):
    with plane.api_client() as api:
        yield kubernetes.client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def core(plane):
    with plane.api_client() as api:
        yield kubernetes.client.CoreV1Api(api)


@pytest.fixture(scope="module")
def policies(plane, custom):
    """The chart's policies as installed (release `attack`), plus its host-namespace policy rendered
    with an empty namespacePrefix (release `attack-empty`); in force before the first test."""
    installed = chart_policies(plane, "attack")
    installed += [doc for doc in chart_policies(plane, "attack-empty", "--set", "config.namespacePrefix=")
                  if doc["metadata"]["name"].endswith("gputenant-host-namespace")]
    plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(installed))
    probe = tenant_body("kube-system")
    wait_for(lambda: _refused(lambda: custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, probe, dry_run="All")),
             timeout=30, interval=0.2, what="the chart's ValidatingAdmissionPolicies to be in force")
    yield installed
    for doc in reversed(installed):
        plane.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")


def _refused(call) -> bool:
    try:
        call()
    except ApiException as error:
        return error.status == 403
    return False


# -- class 7: spec.preventDeletion refuses the DELETE itself ----------------------------------------

@pytest.fixture
def protected_tenant(plane, custom, policies):
    """A tenant with spec.preventDeletion, labelled so a collection delete here reaches only it."""
    name = f"keep-{short_id()}"
    body = tenant_body(name, preventDeletion=True)
    body["metadata"]["labels"] = {"attack": name}
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    yield name
    if plane.cluster_object(GROUP, VERSION, PLURAL, name) is not None:
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": {"preventDeletion": False}})
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.mark.parametrize("how", ["delete", "delete-collection"])
def test_deleting_a_tenant_with_prevent_deletion_is_refused_naming_the_field(plane, custom, protected_tenant, how):
    if how == "delete":
        status, message = refusal(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, protected_tenant))
    else:
        status, message = refusal(lambda: custom.delete_collection_cluster_custom_object(
            GROUP, VERSION, PLURAL, label_selector=f"attack={protected_tenant}"))
    assert status == 403
    assert "spec.preventDeletion: true" in message and "set spec.preventDeletion to false first" in message
    stored = plane.cluster_object(GROUP, VERSION, PLURAL, protected_tenant)
    assert stored is not None and "deletionTimestamp" not in stored["metadata"], "the tenant must not sit Terminating"


def test_clearing_prevent_deletion_lets_the_delete_through(plane, custom, protected_tenant):
    custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, protected_tenant, {"spec": {"preventDeletion": False}})
    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, protected_tenant)
    wait_for(lambda: plane.cluster_object(GROUP, VERSION, PLURAL, protected_tenant) is None, timeout=10,
             what=f"GpuTenant {protected_tenant} to be deleted")


# -- class 7: no host namespace that is a system namespace or the operator's ------------------------

@pytest.mark.parametrize("name", ["kube-system", "kube-public", "kube-node-lease", "default", OPERATOR_NAMESPACE])
def test_an_empty_prefix_cannot_aim_a_tenant_at_a_system_namespace(custom, policies, name):
    status, message = refusal(lambda: custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, tenant_body(name)))
    assert status == 403
    assert message.endswith(f"metadata.name: GpuTenant {name} would live in namespace {name} (namespacePrefix \"\" + "
                            f"the name), which is a system namespace or the operator's (kube-system, kube-public, "
                            f"kube-node-lease, default, {OPERATOR_NAMESPACE}); choose another metadata.name")


# -- class 3: pods/status cannot rewrite identity, queue, pool or GPU-share keys --------------------

@pytest.fixture(scope="module")
def tenant_namespace(plane, core, policies):
    """A tenant's host namespace with one synced pod carrying the keys the guard set, and the
    syncer identity's kubeconfig."""
    tenant = f"st-{short_id()}"
    namespace = plane.create_namespace(f"tenant-{tenant}", labels=naming.tenant_labels(tenant, "namespace")).metadata.name
    rbac = kubernetes.client.RbacAuthorizationV1Api(core.api_client)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "syncer"}, "rules": [
        {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "list", "create", "update", "patch"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "syncer"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SYNCER}]})
    yield tenant, namespace, plane.user(SYNCER)
    core.delete_namespace(namespace)


def synced_pod(core, tenant: str, namespace: str) -> str:
    name = f"job-{short_id()}"
    core.create_namespaced_pod(namespace, {"metadata": {
        "name": name, "labels": {naming.QUEUE_LABEL: tenant, naming.TENANT_LABEL: tenant, "app": "train"},
        "annotations": {"hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,23034,25:;"}},
        "spec": {"automountServiceAccountToken": False, "schedulerName": "kai-scheduler",
                 "containers": [{"name": "c", "image": "registry.example/train"}]}})
    return name


def as_syncer(plane: ControlPlane, kubeconfig: Path) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(plane.api_client(kubeconfig))


STATUS_REWRITES = [
    ("labels", naming.QUEUE_LABEL, "victim"),
    ("labels", naming.QUEUE_LABEL, None),
    ("labels", naming.TENANT_LABEL, "victim"),
    ("labels", "project", "victim"),
    ("labels", "runai/queue", "victim"),
    ("labels", "kai.scheduler/node-pool", "h100-mig-small"),
    ("annotations", "pod-group-name", "pg-victim"),
    ("annotations", "hami.io/vgpu-devices-allocated", None),
    ("annotations", "hami.io/vgpu-devices-to-allocate", "GPU-0,NVIDIA,81920,100:;"),
    ("annotations", "gpu-fraction", "0.5"),
    ("annotations", "nvidia.com/use-gpuuuid", "GPU-0"),
    ("labels", "runai-gpu-group/victim-gpu", "victim-gpu"),
    ("labels", "spark-app-selector", "gang.victim.0"),
    ("labels", "app", "kai-resource-reservation"),
    ("annotations", "user", "victim"),
]


@pytest.mark.parametrize("where,key,value", STATUS_REWRITES,
                         ids=[f"{where}-{key}-{'remove' if value is None else 'set'}" for where, key, value in STATUS_REWRITES])
def test_the_tenants_syncer_cannot_rewrite_identity_keys_through_pods_status(plane, core, tenant_namespace, where, key, value):
    tenant, namespace, syncer = tenant_namespace
    name = synced_pod(core, tenant, namespace)
    api = as_syncer(plane, syncer)
    pod = api.read_namespaced_pod(name, namespace)
    original = dict(getattr(pod.metadata, where) or {})
    keys = dict(original)
    if value is None:
        keys.pop(key)
    else:
        keys[key] = value
    setattr(pod.metadata, where, keys)
    status, message = refusal(lambda: api.replace_namespaced_pod_status(name, namespace, pod))
    assert status == 403
    assert f"metadata.{where}: a pods/status write may not change {key} " in message
    assert getattr(core.read_namespaced_pod(name, namespace).metadata, where) == original


def test_status_writes_that_leave_identity_keys_alone_pass(plane, core, tenant_namespace):
    tenant, namespace, syncer = tenant_namespace
    name = synced_pod(core, tenant, namespace)
    api = as_syncer(plane, syncer)
    pod = api.read_namespaced_pod(name, namespace)
    pod.metadata.labels["app"] = "eval"
    pod.status.message = "synced"
    stored = api.replace_namespaced_pod_status(name, namespace, pod)
    assert (stored.metadata.labels["app"], stored.status.message) == ("eval", "synced")
    assert stored.metadata.labels[naming.QUEUE_LABEL] == tenant


# -- class 7: the GpuTenant webhook's checks with the real API ------------------------------------

def problems(plane: ControlPlane, name: str, body: dict, old: dict | None) -> list[str]:
    async def review() -> list[str]:
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "attack-test") as client:
            return await tenant_api_problems(client, CONFIG, name, body, old)
    return asyncio.run(review())


def test_a_new_tenant_cannot_adopt_a_namespace_the_operator_did_not_create(plane, core, crds):
    name = f"adopt-{short_id()}"
    plane.create_namespace(naming.host_namespace(name, CONFIG), labels={"team": "payments"})
    try:
        [problem] = problems(plane, name, tenant_body(name), None)
    finally:
        core.delete_namespace(naming.host_namespace(name, CONFIG))
    assert problem.startswith(f"[not-created-by-operator] metadata.name: tenant {name} would take over "
                              f"namespace tenant-{name}, which the operator did not create")


def test_a_new_tenant_cannot_take_over_a_kai_queue_and_delete_it_on_offboarding(plane, custom):
    name = f"queue-{short_id()}"
    custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": 4, "limit": 4, "overQuotaWeight": 1}}}})
    try:
        [problem] = problems(plane, name, tenant_body(name), None)
    finally:
        custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)
    assert f"would take over KAI Queue {name}, which the operator did not create for it" in problem


def test_a_tenants_own_objects_are_not_foreign(plane, core, crds):
    name = f"own-{short_id()}"
    plane.create_namespace(naming.host_namespace(name, CONFIG), labels=naming.tenant_labels(name, "namespace"))
    try:
        assert problems(plane, name, tenant_body(name), None) == []
    finally:
        core.delete_namespace(naming.host_namespace(name, CONFIG))


@pytest.fixture
def running_tenant(plane, core, crds):
    """A tenant's host namespace with its vCluster control-plane pod and one workload pod."""
    name = f"trust-{short_id()}"
    namespace = plane.create_namespace(naming.host_namespace(name, CONFIG),
                                       labels=naming.tenant_labels(name, "namespace")).metadata.name
    for pod_name, labels in ((f"{name}-0", naming.vcluster_pod_labels(name)), ("notebook", {"app": "notebook"})):
        core.create_namespaced_pod(namespace, {"metadata": {"name": pod_name, "labels": labels}, "spec": {
            "automountServiceAccountToken": False, "containers": [{"name": "c", "image": "registry.example/x"}]}})
    yield name, namespace
    core.delete_namespace(namespace)


@pytest.mark.parametrize("before,after", [("Untrusted", "Trusted"), ("Untrusted", "Internal"), ("Internal", "Trusted")])
def test_weakening_trust_while_pods_run_is_refused(plane, running_tenant, before, after):
    name, namespace = running_tenant
    [problem] = problems(plane, name, tenant_body(name, after), tenant_body(name, before))
    assert problem == (f"[trust-weakened] spec.trust {before} -> {after} weakens the isolation of tenant {name} while 1 of "
                       f"its pods run in {namespace} (notebook); stop them first, or the platform team annotates the "
                       f"GpuTenant {ALLOW_TRUST_CHANGE_ANNOTATION}: \"{after}\" (docs/trust-levels.md)")


def test_the_platform_team_can_allow_a_weaker_trust_explicitly(plane, running_tenant):
    name, _ = running_tenant
    body = tenant_body(name, "Trusted")
    body["metadata"]["annotations"] = {ALLOW_TRUST_CHANGE_ANNOTATION: "Trusted"}
    assert problems(plane, name, body, tenant_body(name, "Untrusted")) == []
    body["metadata"]["annotations"] = {ALLOW_TRUST_CHANGE_ANNOTATION: "Internal"}
    assert problems(plane, name, body, tenant_body(name, "Untrusted")), "the annotation names one trust"


def test_trust_may_weaken_once_only_the_control_plane_runs(plane, core, running_tenant):
    name, namespace = running_tenant
    core.delete_namespaced_pod("notebook", namespace, grace_period_seconds=0)
    wait_for(lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "notebook"],
             timeout=10, what="the notebook pod to be gone")
    assert problems(plane, name, tenant_body(name, "Trusted"), tenant_body(name, "Untrusted")) == []


# -- class 6: tenant pods cannot reach the operator's namespace -----------------------------------

def selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector selects an object with `labels`."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    tests = {"In": lambda e: labels.get(e["key"]) in e["values"],
             "NotIn": lambda e: labels.get(e["key"]) not in e["values"],
             "Exists": lambda e: e["key"] in labels, "DoesNotExist": lambda e: e["key"] not in labels}
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions") or [])


def test_no_egress_rule_of_a_tenant_namespace_selects_the_operators_namespace(plane, core, crds):
    name = f"net-{short_id()}"
    tenant = GpuTenant.model_validate(tenant_body(name, "Internal", gpu={"quota": 1}))
    objects = render_tenant(tenant, decide(name, tenant.spec, CONFIG), CONFIG).objects
    policies = [copy.deepcopy(o) for o in objects if o["kind"] == "NetworkPolicy"]
    namespace = naming.host_namespace(name, CONFIG)
    plane.create_namespace(namespace, labels=naming.tenant_labels(name, "namespace"))
    if not [n for n in core.list_namespace().items if n.metadata.name == OPERATOR_NAMESPACE]:
        plane.create_namespace(OPERATOR_NAMESPACE)
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=attack-test", "-f", "-", input=yaml.safe_dump_all(policies))
        networking = kubernetes.client.NetworkingV1Api(core.api_client)
        isolation = networking.read_namespaced_network_policy(naming.ISOLATION_POLICY_NAME, namespace).to_dict()
        vcluster_egress = networking.read_namespaced_network_policy(naming.VCLUSTER_EGRESS_POLICY_NAME,
                                                                    namespace).to_dict()
        operator_labels = core.read_namespace(OPERATOR_NAMESPACE).metadata.labels
    finally:
        core.delete_namespace(namespace)
    peers = [peer for rule in isolation["spec"]["egress"] for peer in rule["to"]]
    namespace_peers = [peer for peer in peers if peer.get("namespace_selector") is not None]
    assert namespace_peers
    for peer in namespace_peers:
        selector = {"matchLabels": peer["namespace_selector"]["match_labels"],
                    "matchExpressions": peer["namespace_selector"]["match_expressions"]}
        assert not selects(selector, operator_labels), f"{peer} lets tenant pods reach {OPERATOR_NAMESPACE}"
    [ip_block] = [peer["ip_block"] for peer in peers if (peer.get("ip_block") or {}).get("cidr") == "0.0.0.0/0"]
    assert ip_block == {"cidr": "0.0.0.0/0", "_except": [str(n) for n in CONFIG.cluster_networks]}
    def api_server(policy: dict) -> list[str]:
        return [peer["ip_block"]["cidr"] for rule in policy["spec"]["egress"] if rule.get("ports")
                for peer in rule["to"] if peer.get("ip_block")]
    assert api_server(isolation) == [], "tenant code does not reach the host API server"
    assert api_server(vcluster_egress) == [str(n) for n in CONFIG.api_server_networks], \
        "the vCluster pod reaches the addresses the rest of the cluster opens by port only"


# -- class 8: host-side readers of a tenant namespace do not get its service-account tokens ---------

@pytest.fixture(scope="module")
def token_namespace(plane, core, crds):
    """A host namespace with the tenant's rendered Roles and RoleBindings (owner, and a view and an
    edit member), and a Secret where vCluster keeps a synced pod's token with useSecretsForSATokens."""
    name = f"tok-{short_id()}"
    body = tenant_body(name, "Internal", gpu={"quota": 1}, members=[
        {"kind": "User", "name": f"{name}-viewer", "role": "view"}, {"kind": "User", "name": f"{name}-editor", "role": "edit"}])
    tenant = GpuTenant.model_validate(body)
    rendered = render_tenant(tenant, decide(name, tenant.spec, CONFIG), CONFIG)
    assert rendered.vcluster_values["sync"]["toHost"]["pods"]["useSecretsForSATokens"] is True
    namespace = naming.host_namespace(name, CONFIG)
    plane.create_namespace(namespace, labels=naming.tenant_labels(name, "namespace"))
    rbac = [o for o in rendered.objects if o["kind"] in ("Role", "RoleBinding")]
    plane.kubectl("apply", "--server-side", "--field-manager=attack-test", "-f", "-", input=yaml.safe_dump_all(rbac))
    core.create_namespaced_secret(namespace, {"metadata": {"name": "train-0-sa-token"},
                                              "stringData": {"token": "eyJ-the-synced-pods-token"}})
    yield name, namespace
    core.delete_namespace(namespace)


@pytest.mark.parametrize("who", ["viewer", "editor", "owner"])
def test_no_host_side_reader_of_the_tenant_namespace_gets_a_service_account_token(plane, token_namespace, who):
    name, namespace = token_namespace
    user = "owner" if who == "owner" else f"{name}-{who}"
    api = kubernetes.client.CoreV1Api(plane.api_client(plane.user(user)))
    assert isinstance(api.list_namespaced_pod(namespace).items, list), f"{who} reads the pods (and their annotations)"
    for attempt in (lambda: api.read_namespaced_secret("train-0-sa-token", namespace),
                    lambda: api.list_namespaced_secret(namespace)):
        status, message = refusal(attempt)
        assert status == 403 and f'User "{user}" cannot' in message
