"""The tenant API's admission checks as pure functions, and the chart's pods/status policy holding
the same identity keys as the code. (The same checks against a real API server:
e2e/tests/test_attack_tenant_api.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gputenant.api.v1alpha1 import GpuTenantSpec, Trust
from gputenant.config.models import OperatorConfig
from gputenant.guard.tenant_admission import (
    ALLOW_TRUST_CHANGE_ANNOTATION,
    PROTECTED_POD_KEY_PREFIXES,
    PROTECTED_POD_KEYS,
    PROTECTED_POD_LABEL_VALUES,
    adoption_problem,
    host_namespace_problem,
    parent_queue_problem,
    trust_change_problem,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpu-tenant-operator"
TRUSTED, INTERNAL, UNTRUSTED = Trust.TRUSTED, Trust.INTERNAL, Trust.UNTRUSTED


def spec(**gpu) -> GpuTenantSpec:
    return GpuTenantSpec.model_validate({"trust": "Internal", "owners": [{"kind": "User", "name": "a"}], "gpu": gpu})


@pytest.mark.parametrize("prefix,name,namespace", [
    ("", "kube-system", "kube-system"), ("", "default", "default"), ("kube-", "public", "kube-public"),
    ("", "kube-node-lease", "kube-node-lease"), ("gpu-", "tenant-operator", "gpu-tenant-operator"),
])
def test_a_tenant_may_not_live_in_a_system_or_the_operators_namespace(prefix, name, namespace):
    problem = host_namespace_problem(name, OperatorConfig(namespace_prefix=prefix))
    assert problem.startswith(f"[host-namespace] metadata.name: tenant {name} would live in namespace {namespace}")
    assert "choose another name" in problem


def test_the_default_prefix_keeps_every_name_out_of_system_namespaces():
    assert host_namespace_problem("kube-system", OperatorConfig()) is None


def owned(kind: str, name: str, tenant: str | None) -> dict:
    labels = {"app.kubernetes.io/managed-by": "gpu-tenant-operator", "gputenant.io/tenant": tenant} if tenant else {}
    return {"kind": kind, "metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize("namespace,queue,taken", [
    (owned("Namespace", "tenant-a", None), None, "namespace tenant-a"),
    (None, owned("Queue", "a", None), "KAI Queue a"),
    (owned("Namespace", "tenant-a", "b"), owned("Queue", "a", "b"), "namespace tenant-a and KAI Queue a"),
])
def test_a_new_tenant_may_not_take_over_objects_the_operator_did_not_create_for_it(namespace, queue, taken):
    problem = adoption_problem("a", OperatorConfig(), namespace, queue)
    assert problem.startswith(f"[not-created-by-operator] metadata.name: tenant a would take over {taken},")


def test_a_tenants_own_leftovers_are_not_foreign():
    assert adoption_problem("a", OperatorConfig(), owned("Namespace", "tenant-a", "a"), owned("Queue", "a", "a")) is None
    assert adoption_problem("a", OperatorConfig(), None, None) is None


@pytest.mark.parametrize("parent,parents,why", [
    ("b", [], "is the queue of tenant b"),
    ("a", [], "is the tenant's own queue"),
    ("b", ["research"], "is the queue of tenant b"),
    ("sales", ["research"], "is not one of the platform's parent queues"),
])
def test_a_parent_queue_must_be_the_platforms(parent, parents, why):
    problem = parent_queue_problem("a", spec(parentQueue=parent), ["b"], OperatorConfig(parent_queues=parents))
    assert problem.startswith(f"[parent-queue] spec.gpu.parentQueue {parent} {why};")


@pytest.mark.parametrize("parent,parents", [(None, []), ("research", []), ("research", ["research"])])
def test_the_platforms_parent_queues_are_allowed(parent, parents):
    gpu = {"parentQueue": parent} if parent else {}
    assert parent_queue_problem("a", spec(**gpu), ["b"], OperatorConfig(parent_queues=parents)) is None


@pytest.mark.parametrize("before,after", [(UNTRUSTED, TRUSTED), (UNTRUSTED, INTERNAL), (INTERNAL, TRUSTED)])
def test_weakening_trust_while_pods_run_is_refused_naming_the_field_and_the_way_out(before, after):
    problem = trust_change_problem("a", before, after, {}, ["job-1", "job-0"], "tenant-a")
    assert problem.startswith(f"[trust-weakened] spec.trust {before.value} -> {after.value} weakens")
    assert "2 of its pods run in tenant-a (job-0, job-1)" in problem
    assert f'{ALLOW_TRUST_CHANGE_ANNOTATION}: "{after.value}"' in problem


@pytest.mark.parametrize("before,after,pods,annotations", [
    (TRUSTED, UNTRUSTED, ["job"], {}),  # stronger isolation
    (UNTRUSTED, TRUSTED, [], {}),  # nothing runs
    (UNTRUSTED, TRUSTED, ["job"], {ALLOW_TRUST_CHANGE_ANNOTATION: "Trusted"}),  # the platform team said so
])
def test_trust_changes_that_are_allowed(before, after, pods, annotations):
    assert trust_change_problem("a", before, after, annotations, pods, "tenant-a") is None


def test_the_allow_annotation_names_exactly_the_new_trust():
    assert trust_change_problem("a", UNTRUSTED, TRUSTED, {ALLOW_TRUST_CHANGE_ANNOTATION: "Internal"}, ["job"], "tenant-a")


def render_chart(template: str, *args: str) -> list[dict]:
    from kubeplane.tools import tools_bin_dir

    helm = tools_bin_dir() / "helm"
    if not helm.is_file():
        pytest.skip(f"no pinned helm at {helm}; run `make tools`")
    rendered = subprocess.run([str(helm), "template", "gto", str(CHART), *args, "--show-only", f"templates/{template}"],
                              capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def test_the_operators_pods_admit_no_tenant_namespace_and_no_cluster_network():
    [policy] = render_chart("networkpolicy.yaml", "--set", "config.clusterNetworks={10.244.0.0/16,10.96.0.0/12}",
                            "--set", "config.apiServerNetworks={192.168.0.10/32}")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "gto"
    outside_cluster = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16", "10.96.0.0/12"]}}
    guard, liveness, metrics = policy["spec"]["ingress"]
    assert guard == {"from": [outside_cluster, {"ipBlock": {"cidr": "192.168.0.10/32"}}],
                     "ports": [{"protocol": "TCP", "port": 9443}, {"protocol": "TCP", "port": 9444}]}
    assert liveness == {"from": [outside_cluster], "ports": [{"protocol": "TCP", "port": 8080}]}
    assert metrics == {"from": [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"},
        "matchExpressions": [{"key": "gputenant.io/tenant", "operator": "DoesNotExist"}]}}],
        "ports": [{"protocol": "TCP", "port": 8081}]}


def test_by_default_no_private_address_reaches_the_operators_pods():
    """The chart's default clusterNetworks: every private range, so no pod of any usual pod
    network gets to the guard or the liveness port by address."""
    [policy] = render_chart("networkpolicy.yaml")
    [config] = [doc for doc in render_chart("configmap.yaml")]
    networks = yaml.safe_load(config["data"]["config.yaml"])["clusterNetworks"]
    assert networks == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]
    for rule in policy["spec"]["ingress"]:
        assert all(peer.get("ipBlock", {}).get("except", networks) == networks for peer in rule["from"])


def test_the_charts_pod_status_policy_protects_the_same_keys_as_the_code():
    [policy] = [doc for doc in render_chart("admission-policies.yaml")
                if doc["kind"] == "ValidatingAdmissionPolicy" and doc["metadata"]["name"].endswith("pod-status-identity")]
    variables = {variable["name"]: variable["expression"] for variable in policy["spec"]["variables"]}
    assert yaml.safe_load(variables["exact"]) == list(PROTECTED_POD_KEYS)
    assert yaml.safe_load(variables["prefixes"]) == list(PROTECTED_POD_KEY_PREFIXES)
    assert yaml.safe_load(variables["values"]) == {key: list(values) for key, values in PROTECTED_POD_LABEL_VALUES.items()}


def test_the_gputenant_webhook_refuses_another_tenants_queue_as_parent():
    from gputenant.guard.tenant_checks import check_tenant_change
    from gputenant.policy.choose import decide

    config = OperatorConfig()
    victim = spec()
    problems, _ = check_tenant_change(config, "a", spec(parentQueue="b"), None, [("b", victim, decide("b", victim, config))], [])
    assert problems == ["[parent-queue] spec.gpu.parentQueue b is the queue of tenant b; name a department queue of "
                        "the platform team, or leave gpu.parentQueue unset"]
