"""One kube-apiserver's files and its start: the serving pair, service-account keys, the CA it
trusts for client certificates and the admin pair it is probed with; also the plain HTTP(S) probes
the plane's components are checked with. The plane's own API server and every virtual one use it.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterable
from pathlib import Path

from .pki import CertificateAuthority, KeyPair, service_account_keys
from .process import Process, healthz_ok, wait_until_serving

ADMIN_USER = "kubeplane-admin"
SERVICE_CIDR = "10.0.0.0/16"
KUBERNETES_SERVICE_IP = "10.0.0.1"
"""The `kubernetes` Service's ClusterIP (the first of SERVICE_CIDR), which every pod reaches."""
SERVICE_ACCOUNT_ISSUER = f"https://{KUBERNETES_SERVICE_IP}"
"""An issuer URL pods can dial (the plane runs no cluster DNS, so kubernetes.default.svc.cluster.local
names nothing there): a vCluster API server configured with it as its OIDC issuer
(spec.vcluster.oidc, e2e/tests/test_oidc_login.py) fetches the discovery document and the keys
from it, as a relying party of a real cluster's published issuer would."""
"""65534 ClusterIPs: one vCluster Service per tenant, so benchmarks of 500 tenants fit (a /24 held 254)."""
SERVING_DNS_NAMES = [
    "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
SERVING_IPS = ["127.0.0.1", KUBERNETES_SERVICE_IP]

# All but NodeRestriction are on by default in 1.35; listed so the tests' assumptions are visible.
ADMISSION_PLUGINS = [
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "NodeRestriction", "PodSecurity",
    "Priority", "DefaultStorageClass", "ResourceQuota", "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
]


def https_status(port: int, path: str, ca_file: Path, client: tuple[Path, Path] | None = None,
                 user_agent: str = "kubeplane") -> int | None:
    """The HTTP status of GET https://127.0.0.1:port/path, or None while nothing answers.
    Plain http.client on purpose: no proxy settings from the environment apply."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if client:
        context.load_cert_chain(*map(str, client))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", path, headers={"User-Agent": user_agent})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def http_ok(port: int, path: str) -> bool:
    """Whether plain-HTTP `path` on 127.0.0.1:`port` answers 200 (etcd, the kube components)."""
    return healthz_ok("127.0.0.1", port, path, timeout=5)


class APIServerFiles:
    """One kube-apiserver's files in its own directory (serving pair, service-account keys, the CA
    it trusts for client certificates, an admin client pair to probe it with) and its start."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.ca_cert = directory / "ca.crt"
        self.serving = (directory / "serving.crt", directory / "serving.key")
        self.admin = (directory / "admin.crt", directory / "admin.key")
        self.sa_private_key = directory / "sa.key"
        self.sa_public_key = directory / "sa.pub"

    def create(self, ca: CertificateAuthority, extra_dns_names: Iterable[str] = (),
               extra_ips: Iterable[str] = ()) -> KeyPair:
        """Write all files and return the admin pair."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_cert.write_bytes(ca.pair.cert_pem)
        ca.serving_pair("kube-apiserver", SERVING_DNS_NAMES + list(extra_dns_names),
                        SERVING_IPS + list(extra_ips)).write(self.directory, "serving")
        admin = ca.client_pair(ADMIN_USER, ["system:masters"])
        admin.write(self.directory, "admin")
        private, public = service_account_keys()
        self.sa_private_key.touch(mode=0o600)
        self.sa_private_key.write_bytes(private)
        self.sa_public_key.write_bytes(public)
        return admin

    def apiserver_args(self, port: int, etcd_url: str, etcd_prefix: str) -> list[str]:
        return [
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--etcd-servers={etcd_url}", f"--etcd-prefix={etcd_prefix}",
            f"--tls-cert-file={self.serving[0]}", f"--tls-private-key-file={self.serving[1]}",
            f"--client-ca-file={self.ca_cert}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            # the discovery document names the keys where pods reach them (default: the advertised 127.0.0.1)
            f"--service-account-jwks-uri={SERVICE_ACCOUNT_ISSUER}/openid/v1/jwks",
            f"--service-account-key-file={self.sa_public_key}",
            f"--service-account-signing-key-file={self.sa_private_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            # Endpoints may not hold loopback addresses, and nothing in-cluster dials the apiserver.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
        ]

    def start(self, binary: Path, port: int, etcd_url: str, etcd_prefix: str, log_path: Path,
              name: str, extra_args: Iterable[str] = ()) -> Process:
        process = Process(name, [str(binary), *self.apiserver_args(port, etcd_url, etcd_prefix),
                                 *extra_args], log_path)
        wait_until_serving(
            process, lambda: https_status(port, "/readyz", self.ca_cert, self.admin) == 200,
            f"{name} /readyz on port {port}")
        return process

