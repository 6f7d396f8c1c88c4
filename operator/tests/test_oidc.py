"""Unit tests of spec.vcluster.oidc: the model's allow-list, the API server flags and CA volume it
renders into the chart's values, the owners' binding inside the vCluster and the kubelogin kubeconfig."""

from __future__ import annotations

import base64

import jsonschema
import pytest
from pydantic import ValidationError
from test_render import CONFIG, by_kind, decision, tenant, upstream_schema  # noqa: F401 (fixture)

from gputenant import naming
from gputenant.api.v1alpha1 import SharingMode, VClusterOIDC
from gputenant.kubeconfigs import binding_hash, oidc_kubeconfig, oidc_owners_binding
from gputenant.render import render_tenant
from gputenant.render.vcluster import OIDC_CA_HASH_ANNOTATION

CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAA\n-----END CERTIFICATE-----\n"
ISSUER = {"issuerURL": "https://login.example.com/realms/gpu", "clientID": "gpu-tenants"}


def oidc(**fields) -> VClusterOIDC:
    return VClusterOIDC.model_validate({**ISSUER, **fields})


def values_of(**oidc_fields) -> dict:
    spec = {"vcluster": {"oidc": {**ISSUER, **oidc_fields}}}
    values = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert values is not None
    return values


def test_defaults_prefix_users_and_groups_and_verify_rs256():
    model = oidc()
    assert (model.username_claim, model.username_prefix, model.groups_claim, model.groups_prefix) == (
        "sub", "oidc:", "groups", "oidc:")
    assert [alg.value for alg in model.signing_algs] == ["RS256"]


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"issuerURL": "http://login.example.com"}, "issuerURL", "https URL"),
    ({"issuerURL": "https://"}, "issuerURL", "https URL"),
    ({"issuerURL": "https://login.example.com/?realm=gpu"}, "issuerURL", "without query"),
    ({"issuerURL": "https://user@login.example.com"}, "issuerURL", "without query, fragment or user"),
    ({"clientID": "two words"}, "clientID", "pattern"),
    ({"usernamePrefix": "system:"}, "usernamePrefix", "reserved 'system:'"),
    ({"groupsPrefix": "system:oidc:"}, "groupsPrefix", "system:masters"),
    ({"groupsPrefix": "-"}, "groupsPrefix", "non-empty prefix"),
    ({"usernamePrefix": ""}, "usernamePrefix", "at least 1"),
    ({"signingAlgs": ["HS256"]}, "signingAlgs", "RS256"),
    ({"signingAlgs": ["ES256", "ES256"]}, "signingAlgs", "unique"),
    ({"caBundle": "not a certificate"}, "caBundle", "BEGIN CERTIFICATE"),
    ({"caBundle": CA + "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"}, "caBundle", "no private key"),
])
def test_bad_settings_are_refused_naming_the_field_and_the_fix(fields, field, words):
    with pytest.raises(ValidationError) as caught:
        oidc(**fields)
    [error] = caught.value.errors()
    assert error["loc"][0] == field
    assert words in error["msg"]


def test_the_crd_carries_the_rules_the_model_checks():
    from gputenant.api.crd import build_crd

    for version in build_crd()["spec"]["versions"]:
        _carries_the_oidc_rules(version)


def _carries_the_oidc_rules(version: dict) -> None:
    properties = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["vcluster"]["properties"]["oidc"]
    assert properties["required"] == ["issuerURL", "clientID"]
    rules = str(properties)
    assert "startsWith('system:')" in rules and "caBundle.contains('PRIVATE KEY')" in rules
    assert "url(self).getScheme() == 'https'" in str(properties["properties"]["issuerURL"])


def test_without_oidc_the_values_carry_no_api_server_flags_or_volumes():
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert "apiServer" not in values["controlPlane"]["distro"]["k8s"]
    assert "addVolumes" not in values["controlPlane"]["statefulSet"]["persistence"]
    assert "pods" not in values["controlPlane"]["statefulSet"]


def test_the_api_server_gets_every_oidc_flag_explicitly(upstream_schema):  # noqa: F811
    values = values_of(usernameClaim="email", groupsPrefix="idp:", signingAlgs=["ES256", "RS256"])
    jsonschema.validate(values, upstream_schema)
    assert values["controlPlane"]["distro"]["k8s"]["apiServer"]["extraArgs"] == [
        "--oidc-issuer-url=https://login.example.com/realms/gpu", "--oidc-client-id=gpu-tenants",
        "--oidc-username-claim=email", "--oidc-username-prefix=oidc:", "--oidc-groups-claim=groups",
        "--oidc-groups-prefix=idp:", "--oidc-signing-algs=ES256,RS256"]
    assert "addVolumes" not in values["controlPlane"]["statefulSet"]["persistence"]


def test_a_ca_bundle_is_mounted_from_the_operators_configmap_and_rolls_the_pod_when_it_changes(upstream_schema):  # noqa: F811
    values = values_of(caBundle=CA)
    jsonschema.validate(values, upstream_schema)
    statefulset = values["controlPlane"]["statefulSet"]
    assert "--oidc-ca-file=/etc/gputenant/oidc/ca.crt" in values["controlPlane"]["distro"]["k8s"]["apiServer"]["extraArgs"]
    assert statefulset["persistence"]["addVolumes"] == [
        {"name": "gputenant-oidc-ca", "configMap": {"name": naming.OIDC_CA_CONFIGMAP}}]
    assert statefulset["persistence"]["addVolumeMounts"] == [
        {"name": "gputenant-oidc-ca", "mountPath": "/etc/gputenant/oidc", "readOnly": True}]
    other = values_of(caBundle=CA + CA)["controlPlane"]["statefulSet"]["pods"]["annotations"]
    assert statefulset["pods"]["annotations"][OIDC_CA_HASH_ANNOTATION] != other[OIDC_CA_HASH_ANNOTATION]


def test_the_ca_hash_annotation_passes_the_admission_guard():
    """The control-plane pod runs in the tenant's namespace, where the guard refuses reserved keys."""
    from gputenant.guard import keys

    assert not keys.is_reserved(OIDC_CA_HASH_ANNOTATION, keys.PROTECTED_ANNOTATIONS)
    assert keys.is_reserved("gputenant.io/oidc-ca-sha256", keys.PROTECTED_ANNOTATIONS)


def test_the_ca_configmap_is_rendered_in_the_host_namespace_only_with_a_ca_bundle():
    spec = {"vcluster": {"oidc": {**ISSUER, "caBundle": CA}}}
    objects = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).objects
    [configmap] = [obj for obj in by_kind(objects, "ConfigMap") if obj["metadata"]["name"] == naming.OIDC_CA_CONFIGMAP]
    assert configmap["metadata"]["namespace"] == "tenant-team-a"
    assert configmap["data"] == {"ca.crt": CA}
    without = render_tenant(tenant(vcluster={"oidc": ISSUER}), decision(SharingMode.MIG), CONFIG).objects
    assert naming.OIDC_CA_CONFIGMAP not in {obj["metadata"]["name"] for obj in without}


def test_user_and_group_owners_are_bound_with_their_prefixes_as_admins():
    owners = tenant(owners=[{"kind": "Group", "name": "recsys-leads"}, {"kind": "User", "name": "alice@example.com"},
                            {"kind": "ServiceAccount", "name": "ci", "namespace": "build"}]).spec.owners
    binding = oidc_owners_binding(owners, oidc(usernamePrefix="u:", groupsPrefix="g:"))
    assert binding is not None
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}
    assert binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "g:recsys-leads"},
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "u:alice@example.com"}]


def test_no_binding_without_oidc_or_without_user_and_group_owners():
    service_account = tenant(owners=[{"kind": "ServiceAccount", "name": "ci", "namespace": "build"}]).spec.owners
    assert oidc_owners_binding(tenant().spec.owners, None) is None
    assert oidc_owners_binding(service_account, oidc()) is None
    assert binding_hash(None) == ""


def test_the_binding_hash_changes_with_owners_and_prefixes_only():
    owners = tenant().spec.owners
    first = binding_hash(oidc_owners_binding(owners, oidc()))
    assert first == binding_hash(oidc_owners_binding(owners, oidc(clientID="another-client")))
    assert first != binding_hash(oidc_owners_binding(owners, oidc(usernamePrefix="sso:")))
    assert first != binding_hash(oidc_owners_binding(tenant(owners=[{"kind": "User", "name": "bob"}]).spec.owners, oidc()))


def test_the_oidc_kubeconfig_runs_kubelogin_against_the_issuer():
    config = oidc_kubeconfig("team-a", "https://192.0.2.10:31443", "Q0E=", oidc(caBundle=CA))
    assert config["clusters"] == [{"name": "team-a", "cluster": {
        "server": "https://192.0.2.10:31443", "certificate-authority-data": "Q0E="}}]
    [user] = config["users"]
    assert user["user"]["exec"]["command"] == "kubectl"
    assert user["user"]["exec"]["args"] == [
        "oidc-login", "get-token", "--oidc-issuer-url=https://login.example.com/realms/gpu",
        "--oidc-client-id=gpu-tenants", f"--certificate-authority-data={base64.b64encode(CA.encode()).decode()}"]
    assert config["current-context"] == user["name"] == "team-a-oidc"


def test_owners_may_read_the_oidc_kubeconfig_secret_once_oidc_is_set():
    from gputenant.render.tenant import kubeconfig_secret_rule

    assert kubeconfig_secret_rule(tenant())["resourceNames"] == ["team-a-kubeconfig-admin", "team-a-kubeconfig-view"]
    with_oidc = kubeconfig_secret_rule(tenant(vcluster={"oidc": ISSUER}))
    assert with_oidc["resourceNames"] == ["team-a-kubeconfig-admin", "team-a-kubeconfig-view", "team-a-kubeconfig-oidc"]
