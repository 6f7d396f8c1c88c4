"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) on 127.0.0.1,
and, with `node=True`, kube-scheduler and one real node (node.py: containerd, kubelet, CNI,
kube-proxy) on which pods run.

Without a node there is no kubelet and no scheduler: Pods are admitted and stay Pending, which is
all most of the operator's tests need. Real admission (RBAC, ResourceQuota, ServiceAccount,
PodSecurity, webhooks) and real controllers (namespace deletion, garbage collection, quota status,
StatefulSets) are the point: they are what fakes get wrong.

This module starts and stops the plane; access.py is what its users call (clients, identities,
kubectl, audit), apiserver.py one kube-apiserver's files and flags.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import audit
from .access import PlaneAccess
from .apiserver import ADMIN_USER, SERVICE_CIDR, APIServerFiles, http_ok, https_status
from .kubeconfig import kubeconfig, write_kubeconfig
from .node import Node
from .pki import CertificateAuthority, KeyPair
from .process import PlaneError, Process, free_ports, pid_alive, wait_until_serving
from .scheduler import Scheduler
from .tools import REPO_ROOT
from .virtual_apiserver import VirtualAPIServer

CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
AUDIT_LOG_MAX_MEGABYTES = 100_000
"""Far beyond any run here: the audit log stays one file for the plane's life."""

# With a node: kube-proxy needs EndpointSlices for ordinary Services.
NODE_CONTROLLERS = ["endpointslice-controller"]
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
WEBHOOK_CLIENT_USER = "kube-apiserver-webhook-client"
"""The API server's client certificate to webhooks, which is its front-proxy certificate too."""

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


def _new_plane_dir() -> str:
    """A fresh directory under $KUBEPLANE_ROOT, by default the git-ignored `.e2e-logs/` of the
    repository, where CI can collect the directories kept for failed runs."""
    root = Path(os.environ.get("KUBEPLANE_ROOT") or REPO_ROOT / ".e2e-logs")
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="kubeplane-", dir=root)


class ControlPlane(PlaneAccess):
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
        self._kube_bin_dir: Path | None = None
        self._apiserver = APIServerFiles(self.directory / "pki" / "apiserver")
        self.node: Node | None = Node(self.directory / "node") if node else None
        """The real node (None unless `node=True`)."""
        self._scheduler: Scheduler | None = None

    def require_node(self) -> Node:
        """The node, for code that runs only on a plane started with `node=True`."""
        if self.node is None:
            raise PlaneError(f"the plane in {self.directory} was started without node=True")
        return self.node

    # -- layout -------------------------------------------------------------------------------

    @property
    def pids(self) -> dict[str, int]:
        if not self._owned:
            return dict(self._attached_pids)
        pids = {process.name: process.pid for process in self._processes}
        if self._scheduler and self._scheduler.pid:
            pids["kube-scheduler"] = self._scheduler.pid
        return pids | (self.node.pids() if self.node else {})

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
    def etcd_url(self) -> str:
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
                    self.node.start(bin_dir=self.bin_dir, kube_bin_dir=self.kube_bin_dir, ca=self.ca, ca_file=self._apiserver.ca_cert,
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
        if https_status(plane.ports["apiserver"], "/readyz", plane._apiserver.ca_cert,
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
                self._stop_node(self.node)
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

    def _stop_node(self, node: Node) -> None:
        """Delete the node's pods through the API while it still answers, then stop the node."""
        if self.ports.get("apiserver") and self._processes:
            with self.api_client() as admin:
                node.stop(admin)
        else:
            node.stop()

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
        wait_until_serving(process, lambda: http_ok(self.ports["etcd"], "/health"), "etcd /health")

    @property
    def webhook_client_ca_path(self) -> Path:
        """CA of the client certificate the API server presents to admission webhooks (its own CA,
        not the one that signs users: a user's certificate must not pass for the API server's)."""
        return self._pki_dir / "webhook-client-ca.crt"

    @property
    def webhook_client_pair(self) -> KeyPair:
        """The client certificate and key the API server presents to webhooks (and as its front proxy)."""
        return KeyPair((self._pki_dir / "webhook-client.crt").read_bytes(),
                       (self._pki_dir / "webhook-client.key").read_bytes())

    def _webhook_admission_config(self) -> Path:
        """--admission-control-config-file: every webhook ("*") gets the API server's client certificate."""
        client_ca = CertificateAuthority.create("kubeplane-webhook-client-ca")
        self.webhook_client_ca_path.write_bytes(client_ca.pair.cert_pem)
        pair = client_ca.client_pair(WEBHOOK_CLIENT_USER)
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
        # The webhook client certificate is also the API server's front-proxy certificate, as a
        # platform sets it up for the chart's default webhook.clientCA (FrontProxy): the API server
        # publishes its CA in kube-system/extension-apiserver-authentication, where the guard reads it.
        extra = [f"--admission-control-config-file={self._webhook_admission_config()}",
                 f"--requestheader-client-ca-file={self.webhook_client_ca_path}",
                 f"--requestheader-allowed-names={WEBHOOK_CLIENT_USER}",
                 "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                 "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                 f"--proxy-client-cert-file={self._pki_dir / 'webhook-client.crt'}",
                 f"--proxy-client-key-file={self._pki_dir / 'webhook-client.key'}"]
        if self.audit:
            policy = self._pki_dir / "audit-policy.yaml"
            policy.write_text(audit.POLICY)
            # --audit-log-maxsize 0 still rotates at lumberjack's 100 MB, which a 2,000-tenant bench
            # reaches; readers keep a byte offset into one file, so the log never rotates here.
            extra += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log_path}",
                      "--audit-log-format=json", "--audit-log-mode=blocking",
                      f"--audit-log-maxsize={AUDIT_LOG_MAX_MEGABYTES}"]
        if self.node:
            # The API server calls the kubelet for logs, exec and port-forward: it verifies the
            # kubelet's serving certificate and presents a client certificate of its own.
            client = self.ca.client_pair(KUBELET_CLIENT_USER, ["system:masters"])
            cert, key = client.write(self._pki_dir / "apiserver", "kubelet-client")
            extra += [f"--kubelet-certificate-authority={self._apiserver.ca_cert}",
                      f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}",
                      "--kubelet-preferred-address-types=InternalIP"]
        self._processes.append(self._apiserver.start(
            self.kube_bin_dir / "kube-apiserver", self.ports["apiserver"], self.etcd_url, "/registry",
            self.log_dir / "kube-apiserver.log", "kube-apiserver", extra))

    def _start_controller_manager(self) -> None:
        kcm_dir = self._pki_dir / "controller-manager"
        kcm_dir.mkdir(exist_ok=True)
        client = self.ca.client_pair(CONTROLLER_MANAGER_USER, ["system:masters"])
        config = write_kubeconfig(kcm_dir / "kubeconfig", kubeconfig(
            self.api_url, self.ca_pem, "controller-manager",
            cert_pem=client.cert_pem, key_pem=client.key_pem))
        serving_cert, serving_key = self.ca.serving_pair(
            "kube-controller-manager", ["localhost"], ["127.0.0.1"]).write(kcm_dir, "serving")
        port = self.ports["controller-manager"]
        process = Process("kube-controller-manager", [
            str(self.kube_bin_dir / "kube-controller-manager"), f"--kubeconfig={config}",
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
        wait_until_serving(process, lambda: https_status(port, "/healthz", ca) == 200,
                           f"kube-controller-manager /healthz on port {port}")
        # Pods are only admitted once their namespace has its `default` ServiceAccount.
        wait_until_serving(process, lambda: self._admin_get(
            "/api/v1/namespaces/default/serviceaccounts/default") == 200,
            "the serviceaccount controller to create default/default")

    def _start_scheduler(self) -> None:
        ca = self._apiserver.ca_cert
        self._scheduler = Scheduler(self._pki_dir / "scheduler").start(
            self.kube_bin_dir / "kube-scheduler", self.ca, self.ca_pem, self.api_url,
            self.log_dir / "kube-scheduler.log",
            lambda port: https_status(port, "/healthz", ca) == 200)

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
