"""Class 6 of issue 12: the guard's endpoint itself. Tenant pods can reach the operator's network
(the NetworkPolicy is the other fence), and the guard's answers name tenants' pods and quotas, so
with ``--webhook-client-ca`` it answers only callers presenting a client certificate from that CA:
the API server's, given through its admission configuration's kubeconfig (the plane's API server
presents one, which is its front-proxy certificate too). Most tests present a certificate
themselves; the last one takes the CA the way the chart does by default
(``--webhook-client-ca-from-cluster``) and is called with the plane's own.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
from pathlib import Path

import kubernetes
import pytest

from gputenant.config.models import OperatorConfig
from gputenant.guard.certs import CertificatePaths
from gputenant.guard.flags import add_webhook_arguments
from gputenant.guard.standalone import GuardProcess, GuardThread
from kubeplane import wait_for
from kubeplane.fixtures import install_crds
from kubeplane.pki import CertificateAuthority
from kubeplane.process import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.model_validate({"pools": [{
    "name": "ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 8,
    "timeSlicing": {"replicas": 4}}]})
PROBE = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "probe", "operation": "CREATE", "userInfo": {"username": "tenant"},
    "resource": {"group": "gputenant.io", "version": "v1beta1", "resource": "gputenants"},
    "object": {"apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "metadata": {"name": "curious"},
               "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "c"}], "gpu": {"quota": 8, "limit": 8}}}}}


def remove_guard_configurations(plane) -> None:
    """Both tests below register the guard's configurations; whichever ends last finds them gone."""
    with plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        for delete in (admission.delete_mutating_webhook_configuration,
                       admission.delete_validating_webhook_configuration):
            try:
                delete("gputenant-guard")
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture(scope="module")
def closed_guard(plane, tmp_path_factory):
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    directory = tmp_path_factory.mktemp("closed-guard")
    apiserver_client_ca = CertificateAuthority.create("apiserver-webhook-client-ca")
    (directory / "client-ca.crt").write_bytes(apiserver_client_ca.pair.cert_pem)
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=directory / "serving",
                        client_ca_file=directory / "client-ca.crt").start()
    try:
        wait_for(lambda: plane.cluster_object("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                                              "gputenant-guard"), timeout=60, what="the guard to listen")
        yield guard, apiserver_client_ca, directory
    finally:
        guard.stop()
        remove_guard_configurations(plane)


def ask(ca_file: Path, port: int, pair=None, directory: Path | None = None) -> dict:
    """POST an AdmissionReview to the guard as a tenant pod could, with or without a client certificate."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if pair is not None:
        (directory / "client.crt").write_bytes(pair.cert_pem)
        (directory / "client.key").write_bytes(pair.key_pem)
        context.load_cert_chain(directory / "client.crt", directory / "client.key")
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", "/validate-tenant", body=json.dumps(PROBE),
                           headers={"Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def registered_at(plane, port: int) -> bool:
    """The guard's configurations name a server on `port`: it listens and has registered itself."""
    configuration = plane.cluster_object("admissionregistration.k8s.io", "v1",
                                         "validatingwebhookconfigurations", "gputenant-guard")
    return bool(configuration) and f":{port}/" in configuration["webhooks"][0]["clientConfig"]["url"]


def test_a_caller_without_a_client_certificate_gets_no_answer(closed_guard):
    guard, _, _ = closed_guard
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        ask(guard.server.ca_file, guard.server.port)


def test_a_tenant_certificate_from_the_clusters_ca_gets_no_answer(closed_guard, plane):
    """A tenant's own client certificate (signed by the cluster CA) is not the API server's."""
    guard, _, directory = closed_guard
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        ask(guard.server.ca_file, guard.server.port, plane.ca.client_pair("tenant-dev", []), directory)


def test_the_api_servers_certificate_gets_the_review_answered(closed_guard):
    guard, apiserver_client_ca, directory = closed_guard
    answer = ask(guard.server.ca_file, guard.server.port,
                 apiserver_client_ca.client_pair("kube-apiserver-webhook-client", []), directory)
    assert answer["response"]["uid"] == "probe"
    assert answer["response"]["allowed"] is True


def test_the_guard_process_gputenant_run_starts_answers_only_the_api_server(plane, tmp_path):
    """``gputenant run`` serves the guard from a child process (an interpreter of its own, so
    reconciliation cannot delay reviews); the same flags reach it."""
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    apiserver_client_ca = CertificateAuthority.create("apiserver-webhook-client-ca")
    (tmp_path / "client-ca.crt").write_bytes(apiserver_client_ca.pair.cert_pem)
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    [port] = free_ports(1)
    args = parser.parse_args(["--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--webhook-cert-dir",
                              str(tmp_path / "serving"), "--webhook-client-ca", str(tmp_path / "client-ca.crt")])
    guard = GuardProcess(plane.kubeconfig_path, CONFIG, args).start()
    try:
        wait_for(lambda: registered_at(plane, port), timeout=60, what="the guard process to listen and register itself")
        ca_file = CertificatePaths.in_directory(tmp_path / "serving").ca_bundle
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
            ask(ca_file, port)
        answer = ask(ca_file, port, apiserver_client_ca.client_pair("kube-apiserver-webhook-client", []), tmp_path)
        assert answer["response"]["allowed"] is True
    finally:
        guard.stop()
        remove_guard_configurations(plane)


def test_the_guard_takes_the_front_proxy_ca_the_api_server_publishes(plane, tmp_path):
    """The chart's default (webhook.clientCA FrontProxy): the CA is read from
    kube-system/extension-apiserver-authentication, and only the API server's certificate passes."""
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    [port] = free_ports(1)
    args = parser.parse_args(["--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--webhook-cert-dir",
                              str(tmp_path / "serving"), "--webhook-client-ca-from-cluster"])
    guard = GuardProcess(plane.kubeconfig_path, CONFIG, args).start()
    try:
        wait_for(lambda: registered_at(plane, port), timeout=60,
                 what="the guard process to read its client CA, listen and register")
        ca_file = CertificatePaths.in_directory(tmp_path / "serving").ca_bundle
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
            ask(ca_file, port)
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
            ask(ca_file, port, plane.ca.client_pair("tenant-dev", []), tmp_path)
        answer = ask(ca_file, port, plane.webhook_client_pair, tmp_path)
        assert answer["response"]["allowed"] is True
    finally:
        guard.stop()
        remove_guard_configurations(plane)
