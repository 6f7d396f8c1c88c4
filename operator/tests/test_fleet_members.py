"""fleet.members.member_kubeconfig: the kubeconfig the hub builds from an Argo CD cluster Secret,
and the credentials it refuses (UnsupportedCredentials)."""

from __future__ import annotations

import base64
import json

import pytest

from gputenant.fleet.members import UnsupportedCredentials, member_kubeconfig
from gputenant.kube import KubeClient
from gputenant.kube.credentials import split_inline_credentials

SERVER = "https://east.example:6443"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
CERT_PEM = b"-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n"
KEY_PEM = b"-----BEGIN EC PRIVATE KEY-----\nKEY\n-----END EC PRIVATE KEY-----\n"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def cluster_secret(config: dict | str | None, *, name: str | None = "east", server: str | None = SERVER) -> dict:
    """An Argo CD cluster Secret as the API server returns it (data base64-encoded)."""
    data = {}
    if name is not None:
        data["name"] = b64(name)
    if server is not None:
        data["server"] = b64(server)
    if config is not None:
        data["config"] = b64(config if isinstance(config, str) else json.dumps(config))
    return {"apiVersion": "v1", "kind": "Secret", "data": data,
            "metadata": {"name": "cluster-east-123", "namespace": "argocd",
                         "labels": {"argocd.argoproj.io/secret-type": "cluster"}}}


def test_a_bearer_token_becomes_the_users_token():
    name, kubeconfig = member_kubeconfig(cluster_secret({"bearerToken": "tok-123"}))
    assert name == "east"
    assert kubeconfig == {
        "apiVersion": "v1", "kind": "Config", "current-context": "east",
        "clusters": [{"name": "east", "cluster": {"server": SERVER}}],
        "users": [{"name": "east", "user": {"token": "tok-123"}}],
        "contexts": [{"name": "east", "context": {"cluster": "east", "user": "east"}}]}


def test_the_kubeconfig_loads_into_a_client_for_the_members_server():
    _, kubeconfig = member_kubeconfig(cluster_secret({"bearerToken": "tok-123"}))
    client = KubeClient.from_kubeconfig_dict(kubeconfig, "gpu-tenant-operator")
    assert client.server == SERVER


def test_a_client_certificate_and_ca_pass_through_as_the_pems_argocd_holds():
    config = {"tlsClientConfig": {"caData": b64(CA_PEM), "certData": b64(CERT_PEM), "keyData": b64(KEY_PEM),
                                  "serverName": "kubernetes.default.svc"}}
    _, kubeconfig = member_kubeconfig(cluster_secret(config))
    assert kubeconfig["clusters"][0]["cluster"] == {"server": SERVER, "certificate-authority-data": b64(CA_PEM),
                                                    "tls-server-name": "kubernetes.default.svc"}
    assert kubeconfig["users"][0]["user"] == {"client-certificate-data": b64(CERT_PEM),
                                              "client-key-data": b64(KEY_PEM)}
    _, credentials = split_inline_credentials(kubeconfig)
    assert (credentials.ca, credentials.client_certificate, credentials.client_key) == (CA_PEM, CERT_PEM, KEY_PEM)


def test_token_and_client_certificate_are_both_kept():
    config = {"bearerToken": "tok", "tlsClientConfig": {"certData": b64(CERT_PEM), "keyData": b64(KEY_PEM)}}
    _, kubeconfig = member_kubeconfig(cluster_secret(config))
    assert set(kubeconfig["users"][0]["user"]) == {"token", "client-certificate-data", "client-key-data"}


def test_insecure_skips_tls_verification_and_nothing_else_is_added():
    _, kubeconfig = member_kubeconfig(cluster_secret({"bearerToken": "tok", "tlsClientConfig": {"insecure": True}}))
    assert kubeconfig["clusters"][0]["cluster"] == {"server": SERVER, "insecure-skip-tls-verify": True}
    _, verified = member_kubeconfig(cluster_secret({"bearerToken": "tok", "tlsClientConfig": {"insecure": False}}))
    assert verified["clusters"][0]["cluster"] == {"server": SERVER}


@pytest.mark.parametrize("unsupported", ["execProviderConfig", "awsAuthConfig"])
def test_exec_and_cloud_provider_credentials_are_refused_even_beside_a_token(unsupported):
    provider = {"command": "argocd-k8s-auth", "args": ["gcp"]} if unsupported == "execProviderConfig" else {
        "clusterName": "east", "roleARN": "arn:aws:iam::1:role/x"}
    with pytest.raises(UnsupportedCredentials, match=f"^{unsupported} credentials are not supported by the hub"):
        member_kubeconfig(cluster_secret({"bearerToken": "tok", unsupported: provider}))


@pytest.mark.parametrize("config", [
    None,
    {},
    {"tlsClientConfig": {"insecure": True}},
    {"tlsClientConfig": {"caData": b64(CA_PEM)}},
    {"tlsClientConfig": {"certData": b64(CERT_PEM)}},
    {"tlsClientConfig": {"keyData": b64(KEY_PEM)}},
    {"bearerToken": ""},
], ids=["no-config", "empty", "insecure-only", "ca-only", "cert-without-key", "key-without-cert", "empty-token"])
def test_a_config_without_a_credential_is_refused(config):
    with pytest.raises(UnsupportedCredentials,
                       match="^its config has neither bearerToken nor tlsClientConfig.certData/keyData$"):
        member_kubeconfig(cluster_secret(config))


@pytest.mark.parametrize(("name", "server"), [("east", None), (None, SERVER), ("east", ""), (None, None)],
                         ids=["no-server", "no-name", "empty-server", "neither"])
def test_a_secret_without_name_or_server_is_refused(name, server):
    with pytest.raises(UnsupportedCredentials, match="^the cluster Secret has no name or no server$"):
        member_kubeconfig(cluster_secret({"bearerToken": "tok"}, name=name, server=server))


def test_a_config_that_is_not_json_is_refused():
    with pytest.raises(UnsupportedCredentials, match="^its config is not JSON: "):
        member_kubeconfig(cluster_secret("bearerToken: tok"))


def test_a_secret_without_data_is_refused():
    with pytest.raises(UnsupportedCredentials, match="no name or no server"):
        member_kubeconfig({"metadata": {"name": "cluster-east"}})


@pytest.mark.parametrize("config", ["null", "[]", '"tok"', '{"bearerToken": "tok", "tlsClientConfig": "insecure"}'],
                         ids=["null", "list", "string", "tls-not-an-object"])
def test_a_config_that_is_not_a_json_object_is_refused(config):
    with pytest.raises(UnsupportedCredentials, match="not a JSON object"):
        member_kubeconfig(cluster_secret(config))
