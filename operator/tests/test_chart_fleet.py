"""The chart's fleet objects (templates/fleet.yaml, docs/fleet.md), rendered by the pinned helm: a hub
gets the placement CRD, the generator's ConfigMap, the ApplicationSet and the RBAC of both sides in
Argo CD's namespace; a member only the right to write its report; a single cluster nothing."""

from __future__ import annotations

import yaml
from test_chart_render import CHART, FULLNAME, find, helm, render

from gputenant.fleet.decision import build_placement_crd, generator_config_map

HUB = ("--set", "config.fleet.role=hub", "--set", "config.apiServerNetworks={192.168.0.10/32}",
       "--set", "fleet.applicationSet.repoURL=https://git.example.com/platform/tenants.git")


def test_a_standalone_install_renders_no_fleet_object():
    rendered = render("--set", "config.apiServerNetworks={192.168.0.10/32}")
    assert not [o for o in rendered if "fleet" in o["metadata"]["name"]
                or o["kind"] in ("ApplicationSet", "CustomResourceDefinition") and "placement" in o["metadata"]["name"]]


def test_a_hub_renders_the_placement_crd_the_generators_configmap_and_the_applicationset():
    rendered = render(*HUB)
    crd = find(rendered, "CustomResourceDefinition", "gputenantplacements.gputenant.io")
    assert crd["spec"] == build_placement_crd()["spec"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    configmap = find(rendered, "ConfigMap", "gputenant-fleet-decisions")
    assert configmap["metadata"]["namespace"] == "argocd"
    assert configmap["data"] == generator_config_map("argocd", "gputenant-fleet-decisions")["data"]
    appset = find(rendered, "ApplicationSet", f"{FULLNAME}-fleet")
    [generator] = appset["spec"]["generators"]
    assert generator["clusterDecisionResource"]["configMapRef"] == "gputenant-fleet-decisions"
    assert generator["clusterDecisionResource"]["labelSelector"] == {"matchLabels": {"fleet.gputenant.io/decisions": "true"}}
    template = appset["spec"]["template"]
    assert template["metadata"]["name"] == "gputenant-{{ .tenant }}"
    assert template["spec"]["destination"] == {"name": "{{ .clusterName }}"}
    assert template["spec"]["source"]["directory"] == {"include": "{{ .tenant }}.yaml"}
    assert template["spec"]["syncPolicy"]["automated"]["prune"] is False
    assert "resources-finalizer.argocd.argoproj.io" in template["metadata"]["finalizers"]


def test_a_hub_may_read_secrets_only_in_argocds_namespace_and_argocd_may_only_read_placements():
    rendered = render(*HUB)
    hub_rules = find(rendered, "Role", f"{FULLNAME}-fleet-hub")["rules"]
    secrets = [rule for rule in hub_rules if "secrets" in rule["resources"]]
    assert secrets == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
    assert find(rendered, "Role", f"{FULLNAME}-fleet-hub")["metadata"]["namespace"] == "argocd"
    assert {"apiGroups": ["argoproj.io"], "resources": ["applicationsets"], "resourceNames": [f"{FULLNAME}-fleet"],
            "verbs": ["patch"]} in hub_rules
    config = yaml.safe_load(find(rendered, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    assert config["fleet"] == {"role": "hub", "applicationSetName": f"{FULLNAME}-fleet"}, "the chart names its ApplicationSet"
    reader = find(rendered, "Role", f"{FULLNAME}-fleet-decisions-reader")
    assert reader["rules"] == [{"apiGroups": ["gputenant.io"], "resources": ["gputenantplacements"],
                                "verbs": ["get", "list", "watch"]}]
    binding = find(rendered, "RoleBinding", f"{FULLNAME}-fleet-decisions-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "argocd-applicationset-controller",
                                    "namespace": "argocd"}]


def test_a_hub_without_a_repository_is_refused_naming_the_value():
    result = helm("template", "gto", str(CHART), "--set", "config.fleet.role=hub",
                  "--set", "config.apiServerNetworks={192.168.0.10/32}", check=False)
    assert result.returncode != 0 and "fleet.applicationSet.repoURL is empty" in result.stderr, result.stderr


def test_a_member_may_write_only_its_report():
    rendered = render("--set", "config.fleet.role=member", "--set", "config.apiServerNetworks={192.168.0.10/32}")
    role = find(rendered, "Role", f"{FULLNAME}-fleet-report")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["gpu-tenant-operator-fleet-report"],
         "verbs": ["get", "patch"]}]
    assert not [o for o in rendered if o["kind"] == "ApplicationSet"]
    assert yaml.safe_load(find(rendered, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])["fleet"]["role"] == "member"


def test_values_of_a_chart_before_fleets_still_render(tmp_path):
    """`helm upgrade --reuse-values` from 0.2.0 keeps that release's values, which have no `fleet`."""
    values = tmp_path / "old.yaml"
    values.write_text(yaml.safe_dump({"fleet": None, "config": {"apiServerNetworks": ["192.168.0.10/32"]}}))
    rendered = render("--values", str(values))
    config = yaml.safe_load(find(rendered, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    assert config["fleet"]["applicationSetName"] == f"{FULLNAME}-fleet"
    assert not [o for o in rendered if o["kind"] == "ApplicationSet"]
