"""The chart's least-privilege RBAC, rendered by the pinned helm binary: no wildcard, no Secret
read cluster-wide unless drift.watchSecrets asks for it (list and watch only), none written outside Argo CD's listed namespaces, and a tenant-namespace ClusterRole that holds every right the
real vCluster chart's Role and the operator's tenant Roles need (RBAC refuses a Role its creator
does not hold). The API server's verdict on the same objects is in e2e/tests/test_chart_install.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_chart_render import EXAMPLE_CONFIG, FULLNAME, NAMESPACE, REPO_ROOT, example_values, find, helm, render, rules_of

from gputenant.config.models import OperatorConfig
from kubeplane.vcluster_chart import chart_dir

OWNED_KINDS_WATCHED = {"configmaps", "resourcequotas", "limitranges", "roles", "rolebindings", "networkpolicies"}
OWN_ROLE_BINDING = {"get", "create", "patch"}
"""The operator's own RoleBinding in each tenant namespace, made before it holds any right there."""


def watch_only(kinds: set[str]) -> dict[str, set[str]]:
    granted = {kind: {"list", "watch"} for kind in kinds}
    granted["rolebindings"] = granted.get("rolebindings", set()) | OWN_ROLE_BINDING
    return granted


def watched_cluster_wide(cluster_rules: list[dict]) -> dict[str, set[str]]:
    """The verbs the ClusterRole grants on each owned namespaced kind (and Secrets)."""
    verbs: dict[str, set[str]] = {}
    for rule in cluster_rules:
        for resource in set(rule["resources"]) & (OWNED_KINDS_WATCHED | {"secrets"}):
            verbs.setdefault(resource, set()).update(rule["verbs"])
    return verbs


def test_cluster_role_reads_owned_kinds_only_to_watch_them_secrets_only_when_asked_and_grants_no_wildcards():
    objects = render()
    for role in (o for o in objects if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], (role["metadata"]["name"], rule)
            assert "escalate" not in rule["verbs"] and "impersonate" not in rule["verbs"]
    cluster_rules = rules_of(objects, "ClusterRole", FULLNAME)
    assert watched_cluster_wide(cluster_rules) == watch_only(OWNED_KINDS_WATCHED)
    with_secrets = rules_of(render("--set", "drift.watchSecrets=true"), "ClusterRole", FULLNAME)
    assert watched_cluster_wide(with_secrets) == watch_only(OWNED_KINDS_WATCHED | {"secrets"})
    unwatched = render("--set", "drift.watch=false")
    assert watched_cluster_wide(rules_of(unwatched, "ClusterRole", FULLNAME)) == watch_only(set())
    env = {e["name"]: e.get("value") for e in find(unwatched, "Deployment", FULLNAME)["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    assert (env["GPUTENANT_WATCH_OWNED"], env["GPUTENANT_WATCH_OWNED_SECRETS"]) == ("false", "false")
    [bind] = [r for r in cluster_rules if "bind" in r["verbs"]]
    assert bind == {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                    "verbs": ["bind"], "resourceNames": [f"{FULLNAME}-tenant-namespace"]}


def test_tenant_namespace_role_is_never_bound_by_the_chart():
    objects = render()
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert bindings and all(b["roleRef"]["name"] != f"{FULLNAME}-tenant-namespace" for b in bindings)
    assert {b["roleRef"]["name"] for b in bindings if b["kind"] == "ClusterRoleBinding"} == {FULLNAME}


def _grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules if not rule.get("resourceNames")
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


REAL_VCLUSTER_CHART = chart_dir()
EXAMPLE_TENANTS = sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))
PLANE_KUBE_VERSION = "1.35.4"
"""tools/versions.env's KUBE_VERSION: the chart's rules depend on the cluster's version (pods/resize
from 1.35 on)."""


def _real_chart_rbac(tenant_file: Path, sync_ingresses: bool, tmp_path: Path) -> list[dict]:
    """Every Role and ClusterRole the real vCluster chart renders with the values the operator
    renders for the tenant (as `gputenant render` prints them)."""
    from gputenant.commands.render import load_and_render

    if not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file():
        pytest.skip(f"the real vCluster chart is absent at {REAL_VCLUSTER_CHART}")
    results, _ = load_and_render([str(tenant_file)], str(EXAMPLE_CONFIG))
    roles = []
    for result in results:
        name = result.tenant.metadata.name
        values = dict(result.rendered.vcluster_values)
        values["sync"] = {**values["sync"], "toHost": {**values["sync"]["toHost"],
                                                       "ingresses": {"enabled": sync_ingresses}}}
        values_file = tmp_path / f"{name}-{sync_ingresses}.yaml"
        values_file.write_text(yaml.safe_dump(values))
        out = helm("template", name, str(REAL_VCLUSTER_CHART), "--namespace", f"tenant-{name}",
                   "--kube-version", PLANE_KUBE_VERSION, "--values", str(values_file)).stdout
        roles += [d for d in yaml.safe_load_all(out) if d and d["kind"] in ("Role", "ClusterRole")]
    return roles


@pytest.mark.parametrize("sync_ingresses", [False, True], ids=["default", "syncIngresses"])
@pytest.mark.parametrize("tenant_file", EXAMPLE_TENANTS, ids=lambda path: path.stem)
def test_tenant_namespace_role_holds_every_right_the_real_vcluster_chart_grants(tenant_file, sync_ingresses, tmp_path):
    """RBAC refuses to let the operator's Helm release create the vCluster chart's Role unless the
    operator holds every rule in it (no `escalate`), and a ClusterRole it cannot create at all: the
    real chart, rendered for each example tenant as the operator installs it, must fit."""
    vcluster_roles = _real_chart_rbac(tenant_file, sync_ingresses, tmp_path)
    assert [r["kind"] for r in vcluster_roles] == ["Role"], "the operator cannot create ClusterRoles for a tenant"
    held = _grants(rules_of(render(), "ClusterRole", f"{FULLNAME}-tenant-namespace"))
    for role in vcluster_roles:
        missing = _grants(role["rules"]) - held
        assert not missing, f"the tenant-namespace role lacks {sorted(missing)} of Role {role['metadata']['name']}"
        assert not [rule for rule in role["rules"] if rule.get("resourceNames") or rule.get("nonResourceURLs")]


def test_tenant_namespace_role_holds_the_tenant_roles_the_operator_renders():
    """The Roles the operator renders for a tenant's people (render_tenant) must be grantable too."""
    from gputenant.api.v1alpha1 import GpuTenant
    from gputenant.render.tenant import rbac

    tenant = GpuTenant.model_validate({"metadata": {"name": "team"}, "spec": {
        "trust": "Internal", "owners": [{"kind": "User", "name": "owner"}]}})
    roles, _ = rbac(tenant)
    held = _grants(rules_of(render(), "ClusterRole", f"{FULLNAME}-tenant-namespace"))
    for role in roles:
        named = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                 for v in rule["verbs"]}
        assert not named - held, (role["name"], sorted(named - held))


def test_device_plugin_role_only_with_a_time_slicing_pool(tmp_path):
    name = f"{FULLNAME}-device-plugin-config"
    assert not [o for o in render() if o["metadata"]["name"] == name]
    role = find(render("--values", str(example_values(tmp_path))), "Role", name)
    assert role["metadata"]["namespace"] == OperatorConfig.load(EXAMPLE_CONFIG).device_plugin_config_map.namespace


def test_argocd_secrets_only_in_the_listed_argocd_namespaces():
    assert not [o for o in render() if o["metadata"]["name"].endswith("-argocd-clusters")]
    objects = render("--set", "argocd.namespaces={argocd,argocd-prod}")
    roles = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == f"{FULLNAME}-argocd-clusters"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["argocd", "argocd-prod"]
    assert all(rule["resources"] == ["secrets"] for role in roles for rule in role["rules"])


def test_scope_policy_names_the_operator_and_the_prefix():
    policy = find(render("--set", "config.namespacePrefix=team-"), "ValidatingAdmissionPolicy", f"{FULLNAME}-scope")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{FULLNAME}'")
    assert "startsWith('team-')" in json.dumps(policy["spec"]["validations"])
    assert not [o for o in render("--set", "scopePolicy.enabled=false") if "AdmissionPolicy" in o["kind"]]


def test_the_operator_may_read_only_the_cluster_role_that_owns_the_guard_configurations():
    """The guard's webhook configurations are owned by the tenant-namespace ClusterRole (so
    `helm uninstall` removes them); reading its uid is the only ClusterRole read allowed."""
    cluster_rules = rules_of(render(), "ClusterRole", FULLNAME)
    reads = [r for r in cluster_rules if "clusterroles" in r["resources"] and "get" in r["verbs"]]
    assert reads == [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                      "verbs": ["get"], "resourceNames": [f"{FULLNAME}-tenant-namespace"]}]
    without_guard = rules_of(render("--set", "webhook.enabled=false"), "ClusterRole", FULLNAME)
    assert not [r for r in without_guard if "clusterroles" in r["resources"] and "get" in r["verbs"]]
