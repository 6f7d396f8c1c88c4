"""Certificate rotation under a running guard: a new CA and leaf are written to the guard's
certificate directory (as its renewal loop does when they near expiry), kopf's server restarts on
them, the webhook configurations get the new bundle (new CA next to the old), and the real
apiserver keeps calling the guard without a refused pod."""

from __future__ import annotations

import base64

import kubernetes
from cryptography import x509
from test_guard_admission import TENANT_CRD, container, pod  # noqa: E402 (same directory)

from gputenant import naming
from gputenant.config.models import OperatorConfig
from gputenant.guard.certs import CertificatePaths, ensure_certificates
from gputenant.guard.standalone import GuardThread
from kubeplane import wait_for
from kubeplane.fixtures import install_crds

CONFIG = OperatorConfig.model_validate({"pools": [{
    "name": "rot", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81920,
    "nodeSelector": {"gputenant.io/pool": "rot"}}], "trustModes": {"Untrusted": "Exclusive"}})
NAMESPACE = "tenant-rotation-team"


def ca_bundle(plane) -> list[x509.Certificate]:
    with plane.api_client() as client:
        hook = kubernetes.client.AdmissionregistrationV1Api(client).read_validating_webhook_configuration(
            "gputenant-guard").webhooks[0]
    return x509.load_pem_x509_certificates(base64.b64decode(hook.client_config.ca_bundle))


def _two_cas(plane) -> list[x509.Certificate] | None:
    bundle = ca_bundle(plane)
    return bundle if len(bundle) == 2 else None


def steered(plane) -> bool:
    with plane.api_client() as client:
        try:
            answer = kubernetes.client.CoreV1Api(client).create_namespaced_pod(
                NAMESPACE, pod(container(limits={"nvidia.com/gpu": "1"})), dry_run="All")
        except kubernetes.client.ApiException:
            return False
    return answer.spec.scheduler_name == "kai-scheduler"


def test_rotated_ca_and_leaf_are_served_and_registered(plane, tmp_path):
    install_crds(plane, TENANT_CRD)
    with plane.api_client() as client:
        kubernetes.client.CustomObjectsApi(client).create_cluster_custom_object(
            "gputenant.io", "v1alpha1", "gputenants", {
                "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": "rotation-team"},
                "spec": {"trust": "Untrusted", "owners": [{"kind": "User", "name": "o"}], "gpu": {"quota": 1}}})
    plane.create_namespace(NAMESPACE, labels=naming.tenant_labels("rotation-team", "namespace"))
    paths = CertificatePaths.in_directory(tmp_path)
    try:
        with GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path, file_check_interval=0.5):
            wait_for(lambda: steered(plane), timeout=60, what="the guard to serve the namespace")
            [first_ca] = ca_bundle(plane)
            first_leaf = paths.cert.read_bytes()

            (tmp_path / "ca.crt").unlink()
            (tmp_path / "ca.key").unlink()
            assert ensure_certificates(tmp_path, ["127.0.0.1"])
            assert paths.cert.read_bytes() != first_leaf

            bundle = wait_for(lambda: _two_cas(plane), timeout=30, what="the configurations to carry the new CA bundle")
            assert bundle[1] == first_ca
            x509.load_pem_x509_certificate(paths.cert.read_bytes()).verify_directly_issued_by(bundle[0])
            assert wait_for(lambda: steered(plane), timeout=30, what="pods admitted through the new certificate")
    finally:
        with plane.api_client() as client:
            admission = kubernetes.client.AdmissionregistrationV1Api(client)
            admission.delete_mutating_webhook_configuration("gputenant-guard")
            admission.delete_validating_webhook_configuration("gputenant-guard")
            kubernetes.client.CoreV1Api(client).delete_namespace(NAMESPACE)
            kubernetes.client.CustomObjectsApi(client).delete_cluster_custom_object(
                "gputenant.io", "v1alpha1", "gputenants", "rotation-team")
