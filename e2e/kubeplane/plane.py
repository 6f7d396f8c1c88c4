"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) on 127.0.0.1,
and, with `node=True`, kube-scheduler and one real node (node.py: containerd, kubelet, CNI,
kube-proxy) on which pods run.

Without a node there is no kubelet and no scheduler: Pods are admitted and stay Pending, which is
all most of the operator's tests need. Real admission (RBAC, ResourceQuota, ServiceAccount,
PodSecurity, webhooks) and real controllers (namespace deletion, garbage collection, quota status,
StatefulSets) are the point: they are what fakes get wrong.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import kubernetes

from . import audit
from .kubeconfig import file_stem, kubeconfig, write_kubeconfig
from .node import Node
from .pki import CertificateAuthority, KeyPair, service_account_keys
from .process import PlaneError, Process, free_ports, pid_alive, wait_for, wait_until_serving
from .scheduler import Scheduler
from .tools import REPO_ROOT, ensure_tools

ADMIN_USER = "kubeplane-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.0.0.0/16"
"""65534 ClusterIPs: one vCluster Service per tenant, so benchmarks of 500 tenants fit (a /24 held 254)."""
SERVING_DNS_NAMES = [
    "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
SERVING_IPS = ["127.0.0.1", "10.0.0.1"]

# All but NodeRestriction are on by default in 1.35; listed so the tests' assumptions are visible.
ADMISSION_PLUGINS = [
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "NodeRestriction", "PodSecurity",
    "Priority", "DefaultStorageClass", "ResourceQuota", "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
]

# With a node: kube-proxy needs EndpointSlices for ordinary Services.
NODE_CONTROLLERS = ["endpointslice-controller"]
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"

# Controllers whose behaviour the operator relies on. No node lifecycle controller: the kwok GPU
# nodes (gpu_nodes.create_nodes) and the real node lift the kubelet's not-ready taint themselves.
CONTROLLERS = [
    f"{name}-controller" for name in (
        "namespace", "garbage-collector", "resourcequota", "serviceaccount", "serviceaccount-token",
        "root-ca-certificate-publisher", "clusterrole-aggregation", "statefulset", "deployment",
        "replicaset", "job", "disruption", "validatingadmissionpolicy-status",
        "persistentvolumeclaim-protection", "persistentvolume-protection",
    )
]


class CommandError(subprocess.CalledProcessError):
    """A kubectl or helm call failed; unlike its base class, the message includes stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


def _https_status(port: int, path: str, ca_file: Path, client: tuple[Path, Path] | None = None,
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


def _http_ok(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


class _APIServer:
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
            process, lambda: _https_status(port, "/readyz", self.ca_cert, self.admin) == 200,
            f"{name} /readyz on port {port}")
        return process


def _new_plane_dir() -> str:
    """A fresh directory under $KUBEPLANE_ROOT, by default the git-ignored `.e2e-logs/` of the
    repository, where CI can collect the directories kept for failed runs."""
    root = Path(os.environ.get("KUBEPLANE_ROOT") or REPO_ROOT / ".e2e-logs")
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="kubeplane-", dir=root)


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in one directory; with `node=True` also
    kube-scheduler and a real node (`self.node`, see node.py) on which pods run.

    `ControlPlane(audit=True).start()` in a fresh directory (see _new_plane_dir), or
    `ControlPlane.attach(dir)` to use one that `python -m kubeplane up --dir DIR` keeps running.
    A fresh directory is removed on stop unless something failed or KUBEPLANE_KEEP=1; then its
    path is printed to read the logs.
    """

    def __init__(self, directory: str | Path | None = None, *, audit: bool = False, node: bool = False):
        self._temporary = directory is None
        self.directory = Path(directory or _new_plane_dir()).resolve()
        self.audit = audit
        self.keep = os.environ.get("KUBEPLANE_KEEP") == "1"
        self.ports: dict[str, int] = {}
        self.start_seconds: float | None = None
        self._owned = True
        self._processes: list[Process] = []
        self._attached_pids: dict[str, int] = {}
        self._virtuals: list[VirtualAPIServer] = []
        self._ca: CertificateAuthority | None = None
        self._bin_dir: Path | None = None
        self._apiserver = _APIServer(self.directory / "pki" / "apiserver")
        self.node: Node | None = Node(self.directory / "node") if node else None
        """The real node (None unless `node=True`)."""
        self._scheduler: Scheduler | None = None

    # -- layout -------------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin (system:masters) kubeconfig."""
        return self.directory / "kubeconfigs" / "admin.kubeconfig"

    @property
    def audit_log_path(self) -> Path:
        return self.log_dir / "audit.jsonl"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_pem(self) -> bytes:
        return self._apiserver.ca_cert.read_bytes()

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = ensure_tools()
        return self._bin_dir

    @property
    def pids(self) -> dict[str, int]:
        if not self._owned:
            return dict(self._attached_pids)
        pids = {process.name: process.pid for process in self._processes}
        if self._scheduler and self._scheduler.pid:
            pids["kube-scheduler"] = self._scheduler.pid
        return pids | (self.node.pids() if self.node else {})

    @property
    def _pki_dir(self) -> Path:
        return self.directory / "pki"

    @property
    def _etcd_dir(self) -> Path:
        return self.directory / "etcd"

    @property
    def _owned_dirs(self) -> list[Path]:
        """Everything a plane writes into its directory (which may be a user's `up --dir`)."""
        return [self.directory / name for name in ("etcd", "pki", "logs", "kubeconfigs", "virtual", "helm", "node")]

    @property
    def _state_path(self) -> Path:
        return self.directory / "plane.json"

    @property
    def _etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        started = time.monotonic()
        self._refuse_if_running()
        # Whatever an earlier plane left here was issued by another CA: start from nothing.
        for directory in self._owned_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        for directory in (self._pki_dir, self.log_dir, self.kubeconfig_path.parent):
            directory.mkdir(parents=True)
        names = ("etcd", "etcd-peer", "apiserver", "controller-manager")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        try:
            if self.node:
                self.node.prepare()
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            if self.node:
                self._start_scheduler()
                with self.api_client() as admin:
                    self.node.start(bin_dir=self.bin_dir, ca=self._ca, ca_file=self._apiserver.ca_cert,
                                    apiserver_port=self.ports["apiserver"], service_cidr=SERVICE_CIDR, admin=admin,
                                    log_dir=self.log_dir)
        except BaseException:
            self.keep = True
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        self._state_path.write_text(json.dumps({
            "owner_pid": os.getpid(), "ports": self.ports, "pids": self.pids, "audit": self.audit,
        }, indent=2))
        return self

    @classmethod
    def attach(cls, directory: str | Path) -> ControlPlane:
        """Use the plane another process runs in `directory`; stop() then leaves it running."""
        plane = cls(directory)
        try:
            state = json.loads(plane._state_path.read_text())
        except FileNotFoundError:
            raise PlaneError(f"no plane in {plane.directory}; start one with "
                             f"`python -m kubeplane up --dir {plane.directory}`") from None
        plane._owned = False
        plane.audit = state["audit"]
        plane.ports = state["ports"]
        plane._attached_pids = state["pids"]
        if _https_status(plane.ports["apiserver"], "/readyz", plane._apiserver.ca_cert,
                         plane._apiserver.admin) != 200:
            raise PlaneError(f"the plane in {plane.directory} does not answer at {plane.api_url}")
        return plane

    def stop(self) -> None:
        """Stop virtual apiservers, the scheduler and the node (its pods deleted first, then
        everything it left checked gone: PlaneError if not), then the controller-manager,
        apiserver and etcd; remove etcd's data and, for a temporary plane, the directory (both
        kept when `keep` is set)."""
        for virtual in reversed(self._virtuals):
            virtual.stop()
        self._virtuals.clear()
        if not self._owned:
            return
        if self._scheduler:
            self._scheduler.stop()
            self._scheduler = None
        node_error = None
        if self.node:
            try:
                self._stop_node()
            except PlaneError as error:
                node_error, self.keep = error, True
        self._stop_processes()
        self._state_path.unlink(missing_ok=True)
        if self.keep:
            print(f"kubeplane: kept {self.directory} (logs in {self.log_dir})", file=sys.stderr)
            if node_error:
                raise node_error
            return
        shutil.rmtree(self._etcd_dir, ignore_errors=True)
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _stop_node(self) -> None:
        """Delete the node's pods through the API while it still answers, then stop the node."""
        if self.ports.get("apiserver") and self._processes:
            with self.api_client() as admin:
                self.node.stop(admin)
        else:
            self.node.stop()

    def _stop_processes(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is not None:
            self.keep = True
        self.stop()

    def _refuse_if_running(self) -> None:
        try:
            owner = json.loads(self._state_path.read_text())["owner_pid"]
        except FileNotFoundError:
            return
        if pid_alive(owner):
            raise PlaneError(f"process {owner} already runs a plane in {self.directory}")

    def _write_pki(self) -> None:
        self._ca = CertificateAuthority.create()
        self._ca.pair.write(self._pki_dir, "ca")
        admin = self._apiserver.create(self._ca, extra_ips=[self.node.node_ip] if self.node else [])
        write_kubeconfig(self.kubeconfig_path, kubeconfig(
            self.api_url, self.ca_pem, ADMIN_USER, cert_pem=admin.cert_pem, key_pem=admin.key_pem))

    def _start_etcd(self) -> None:
        client, peer = (f"http://127.0.0.1:{self.ports[p]}" for p in ("etcd", "etcd-peer"))
        process = Process("etcd", [
            str(self.bin_dir / "etcd"), "--name=kubeplane", f"--data-dir={self._etcd_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=kubeplane={peer}",
            # Test data is thrown away: durability only costs time.
            "--unsafe-no-fsync", "--log-level=warn",
        ], self.log_dir / "etcd.log")
        self._processes.append(process)
        wait_until_serving(process, lambda: _http_ok(self.ports["etcd"], "/health"), "etcd /health")

    @property
    def webhook_client_ca_path(self) -> Path:
        """CA of the client certificate the API server presents to admission webhooks (its own CA,
        not the one that signs users: a user's certificate must not pass for the API server's)."""
        return self._pki_dir / "webhook-client-ca.crt"

    def _webhook_admission_config(self) -> Path:
        """--admission-control-config-file: every webhook ("*") gets the API server's client certificate."""
        client_ca = CertificateAuthority.create("kubeplane-webhook-client-ca")
        self.webhook_client_ca_path.write_bytes(client_ca.pair.cert_pem)
        pair = client_ca.client_pair("kube-apiserver-webhook-client")
        (self._pki_dir / "webhook-client.crt").write_bytes(pair.cert_pem)
        (self._pki_dir / "webhook-client.key").write_bytes(pair.key_pem)
        webhook_kubeconfig = self._pki_dir / "webhook-client.kubeconfig"
        webhook_kubeconfig.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "users": [
            {"name": "*", "user": {"client-certificate": str(self._pki_dir / "webhook-client.crt"),
                                   "client-key": str(self._pki_dir / "webhook-client.key")}}]}))
        plugin_config = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
                         "kubeConfigFile": str(webhook_kubeconfig)}
        path = self._pki_dir / "admission-config.json"
        path.write_text(json.dumps({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
                                    "plugins": [{"name": name, "configuration": plugin_config} for name in
                                                ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")]}))
        return path

    def _start_apiserver(self) -> None:
        extra = [f"--admission-control-config-file={self._webhook_admission_config()}"]
        if self.audit:
            policy = self._pki_dir / "audit-policy.yaml"
            policy.write_text(audit.POLICY)
            extra += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log_path}",
                      "--audit-log-format=json", "--audit-log-mode=blocking"]
        if self.node:
            # The API server calls the kubelet for logs, exec and port-forward: it verifies the
            # kubelet's serving certificate and presents a client certificate of its own.
            client = self._ca.client_pair(KUBELET_CLIENT_USER, ["system:masters"])
            cert, key = client.write(self._pki_dir / "apiserver", "kubelet-client")
            extra += [f"--kubelet-certificate-authority={self._apiserver.ca_cert}",
                      f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}",
                      "--kubelet-preferred-address-types=InternalIP"]
        self._processes.append(self._apiserver.start(
            self.bin_dir / "kube-apiserver", self.ports["apiserver"], self._etcd_url, "/registry",
            self.log_dir / "kube-apiserver.log", "kube-apiserver", extra))

    def _start_controller_manager(self) -> None:
        kcm_dir = self._pki_dir / "controller-manager"
        kcm_dir.mkdir(exist_ok=True)
        client = self._ca.client_pair(CONTROLLER_MANAGER_USER, ["system:masters"])
        config = write_kubeconfig(kcm_dir / "kubeconfig", kubeconfig(
            self.api_url, self.ca_pem, "controller-manager",
            cert_pem=client.cert_pem, key_pem=client.key_pem))
        serving_cert, serving_key = self._ca.serving_pair(
            "kube-controller-manager", ["localhost"], ["127.0.0.1"]).write(kcm_dir, "serving")
        port = self.ports["controller-manager"]
        process = Process("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"), f"--kubeconfig={config}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={serving_cert}", f"--tls-private-key-file={serving_key}",
            "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS + (NODE_CONTROLLERS if self.node else []))}",
            # One client for all controllers: fewer tokens to mint at start, same behaviour.
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self._apiserver.sa_private_key}",
            f"--root-ca-file={self._apiserver.ca_cert}",
            "--resource-quota-sync-period=5s", "--namespace-sync-period=30s",
            "--kube-api-qps=200", "--kube-api-burst=400", "--profiling=false",
        ], self.log_dir / "kube-controller-manager.log")
        self._processes.append(process)
        ca = self._apiserver.ca_cert
        wait_until_serving(process, lambda: _https_status(port, "/healthz", ca) == 200,
                            f"kube-controller-manager /healthz on port {port}")
        # Pods are only admitted once their namespace has its `default` ServiceAccount.
        wait_until_serving(process, lambda: self._admin_get(
            "/api/v1/namespaces/default/serviceaccounts/default") == 200,
            "the serviceaccount controller to create default/default")

    def _start_scheduler(self) -> None:
        ca = self._apiserver.ca_cert
        self._scheduler = Scheduler(self._pki_dir / "scheduler").start(
            self.bin_dir / "kube-scheduler", self._ca, self.ca_pem, self.api_url,
            self.log_dir / "kube-scheduler.log",
            lambda port: _https_status(port, "/healthz", ca) == 200)

    def _admin_get(self, path: str, user_agent: str = "kubeplane") -> int | None:
        return _https_status(self.ports["apiserver"], path, self._apiserver.ca_cert,
                             self._apiserver.admin, user_agent)

    # -- identities ---------------------------------------------------------------------------

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            self._ca = CertificateAuthority.load(self._pki_dir / "ca.crt", self._pki_dir / "ca.key")
        return self._ca

    def user(self, name: str, groups: Iterable[str] = ()) -> Path:
        """A kubeconfig authenticating as `name` in `groups` by a client certificate.

        Certificates are signed on demand by the plane's CA, so new identities need no restart.
        """
        groups = list(groups)
        path = self.kubeconfig_path.parent / f"user-{file_stem('@'.join([name, *groups]))}.kubeconfig"
        if not path.exists():
            pair = self.ca.client_pair(name, groups)
            write_kubeconfig(path, kubeconfig(self.api_url, self.ca_pem, name,
                                              cert_pem=pair.cert_pem, key_pem=pair.key_pem))
        return path

    def kubeconfig_for_token(self, token: str, name: str) -> Path:
        """A kubeconfig presenting a bearer token, e.g. one from a TokenRequest."""
        path = self.kubeconfig_path.parent / f"token-{file_stem(name)}.kubeconfig"
        return write_kubeconfig(path, kubeconfig(self.api_url, self.ca_pem, name, token=token))

    # -- clients ------------------------------------------------------------------------------

    def api_client(self, kubeconfig_path: str | Path | None = None) -> kubernetes.client.ApiClient:
        """A `kubernetes` client for the admin or for any kubeconfig from user()/kubeconfig_for_token()."""
        return kubernetes.config.new_client_from_config(
            config_file=str(kubeconfig_path or self.kubeconfig_path))

    def cluster_object(self, group: str, version: str, plural: str, name: str) -> dict | None:
        """A cluster-scoped custom object as the admin sees it, or None when it does not exist
        (tests ask "is the GpuTenant/Queue still there?" more often than anything else)."""
        with self.api_client() as client:
            try:
                return kubernetes.client.CustomObjectsApi(client).get_cluster_custom_object(
                    group, version, plural, name)
            except kubernetes.client.ApiException as error:
                if error.status == 404:
                    return None
                raise

    def env(self, kubeconfig_path: str | Path | None = None) -> dict[str, str]:
        """Environment for subprocesses: KUBECONFIG, the pinned tools first on PATH, and helm's
        state inside the plane directory so the user's helm setup is neither used nor touched."""
        helm_home = self.directory / "helm"
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig_path or self.kubeconfig_path),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    def kubectl(self, *args: str, kubeconfig_path: str | Path | None = None, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
        return self._run("kubectl", args, kubeconfig_path, input, check)

    def helm(self, *args: str, kubeconfig_path: str | Path | None = None, input: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
        return self._run("helm", args, kubeconfig_path, input, check)

    def _run(self, tool: str, args, kubeconfig_path, input, check) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / tool), *args]
        result = subprocess.run(command, env=self.env(kubeconfig_path), input=input,
                                capture_output=True, text=True)
        if check and result.returncode:
            raise CommandError(result.returncode, command, result.stdout, result.stderr)
        return result

    def create_namespace(self, name: str, labels: dict[str, str] | None = None,
                         timeout: float = 30) -> kubernetes.client.V1Namespace:
        """Create a namespace and wait for its `default` ServiceAccount, without which the
        ServiceAccount admission plugin rejects every Pod in it."""
        with self.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            namespace = core.create_namespace(kubernetes.client.V1Namespace(
                metadata=kubernetes.client.V1ObjectMeta(name=name, labels=labels)))
            wait_for(lambda: core.list_namespaced_service_account(
                name, field_selector="metadata.name=default").items,
                timeout=timeout, what=f"ServiceAccount {name}/default")
        return namespace

    # -- audit log ----------------------------------------------------------------------------

    def audit_offset(self) -> int:
        """Where the audit log ends now; pass it as `since_offset` to count only later requests."""
        self._require_audit()
        return audit.log_size(self.audit_log_path)

    def audit_events(self, since_offset: int = 0) -> list[dict]:
        """Audit events since `since_offset`, including every request that completed before this call."""
        self._require_audit()
        marker = f"kubeplane-audit-sync/{uuid.uuid4()}"
        # A response can reach its client just before its audit event is written; a marker request
        # sent afterwards and found in the log proves every earlier event is there too.
        self._admin_get("/version", user_agent=marker)

        def events_up_to_marker() -> list[dict] | None:
            events = list(audit.read_events(self.audit_log_path, since_offset))
            for index, event in enumerate(events):
                if event.get("userAgent") == marker:
                    return events[:index] + events[index + 1:]
            return None
        return wait_for(events_up_to_marker, timeout=10, interval=0.02, what="the audit marker")

    def count_requests(self, since_offset: int = 0, verbs: Iterable[str] | None = audit.WRITE_VERBS,
                       user: str | None = None, user_agent: str | None = None) -> int:
        """How many requests since `since_offset` had one of `verbs` (None: any), came from
        `user` (exact username) and from a client whose User-Agent starts with `user_agent`."""
        verbs = None if verbs is None else set(verbs)
        return sum(audit.matches(event, verbs, user, user_agent)
                   for event in self.audit_events(since_offset))

    def _require_audit(self) -> None:
        if not self.audit:
            raise PlaneError("this plane was started without audit=True")

    # -- virtual apiservers -------------------------------------------------------------------

    def start_virtual_apiserver(self, name: str) -> VirtualAPIServer:
        """Start another kube-apiserver on this plane's etcd under `/vcluster-<name>`.

        The benchmark's LIGHTWEIGHT vCluster mode (bench/vcluster_shared.py) shares one among
        hundreds of tenants, where real vClusters would not fit; tests and the demo run the real
        vCluster on the node. A separate API with its own objects, CRDs and service-account
        signing key. It has no controller-manager,
        so namespaces never finish deleting and no `default` ServiceAccount appears by itself;
        TokenRequest for an existing ServiceAccount works. Its data survives stop(), like a
        vCluster's, so starting the same name again sees the same objects.
        """
        virtual = VirtualAPIServer(self, name).start()
        self._virtuals.append(virtual)
        return virtual


class VirtualAPIServer:
    """A kube-apiserver sharing the plane's etcd and CA; see ControlPlane.start_virtual_apiserver."""

    def __init__(self, plane: ControlPlane, name: str):
        self.name = name
        self.etcd_prefix = f"/vcluster-{name}"
        self._plane = plane
        self._files = _APIServer(plane.directory / "virtual" / name)
        self._process: Process | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self._files.ca_cert.read_bytes()

    @property
    def admin_client_cert_pem(self) -> bytes:
        return self._files.admin[0].read_bytes()

    @property
    def admin_client_key_pem(self) -> bytes:
        return self._files.admin[1].read_bytes()

    @property
    def kubeconfig_path(self) -> Path:
        return self._files.directory / "admin.kubeconfig"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def kubeconfig(self) -> dict:
        """The admin kubeconfig as a dict, e.g. to store in a Secret the way vCluster does."""
        return kubeconfig(self.url, self.ca_pem, f"vcluster-{self.name}",
                          cert_pem=self.admin_client_cert_pem, key_pem=self.admin_client_key_pem)

    def api_client(self, kubeconfig_path: str | Path | None = None) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(
            config_file=str(kubeconfig_path or self.kubeconfig_path))

    def kubeconfig_for_token(self, token: str, name: str) -> Path:
        """A kubeconfig presenting a bearer token issued inside this apiserver."""
        path = self._files.directory / f"token-{file_stem(name)}.kubeconfig"
        return write_kubeconfig(path, kubeconfig(self.url, self.ca_pem, name, token=token))

    def start(self) -> VirtualAPIServer:
        plane = self._plane
        self._files.create(plane.ca, extra_dns_names=[self.name])
        [self.port] = free_ports(1)
        write_kubeconfig(self.kubeconfig_path, self.kubeconfig())
        self._process = self._files.start(
            plane.bin_dir / "kube-apiserver", self.port, plane._etcd_url, self.etcd_prefix,
            plane.log_dir / f"virtual-{self.name}.log", f"virtual kube-apiserver {self.name}")
        return self

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None

    def __enter__(self) -> VirtualAPIServer:
        return self

    def __exit__(self, *_) -> None:
        self.stop()

