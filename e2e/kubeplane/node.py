"""A real node for the plane: containerd + runc, the CNI bridge, the kubelet, kube-proxy and
kube-router's network-policy controller (NetworkPolicies enforced, kube_router.py), in a network
namespace and a cgroup of their own (see netns.py and cgroups.py), with the project's images
imported (images.py).

Pods reach the API server, which listens on the host's loopback only, through the `kubernetes`
Service: its EndpointSlice names `node_ip:API_FORWARD_PORT`, where apiforward.py listens inside
the namespace. The kubelet and kube-proxy use the same address.

stop() ends everything the node started and checks nothing is left: every process in its cgroup
(shims and containers included), every mount under its directory (pod volumes, rootfs overlays,
pod network-namespace mounts), the network namespace with its interfaces and iptables rules, and
the host end of the veth. `leftovers()` says what remains, for tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import kubernetes

from . import images
from .cgroups import NodeCgroup
from .containerd import Containerd
from .kube_proxy import KubeProxy
from .kube_router import KubeRouter
from .kubelet import Kubelet
from .netns import NodeNetwork
from .pki import CertificateAuthority
from .process import PlaneError, Process, pid_alive, wait_for, wait_until_serving

NODE_NAME = "kubeplane-node"
API_FORWARD_PORT = 6443
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NETWORK_POLICIES_ENV = "KUBEPLANE_NETWORK_POLICIES"
"""`0`: the node runs no NetworkPolicy enforcer, as a plain CNI bridge would (to see that the
network tests fail without it)."""
RECORDS_DIR = Path("/run/kubeplane/nodes")
"""One file per running node naming its owner process and directory, so that the node of a plane
whose process was killed (SIGKILL leaves its namespace, cgroup, shims and mounts) is removed by
the next node start on the machine."""


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def mounts_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix)]


def node_ready(api: kubernetes.client.ApiClient, name: str) -> bool:
    try:
        node = kubernetes.client.CoreV1Api(api).read_node(name)
    except kubernetes.client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])  # type: ignore[union-attr]


class Node:
    def __init__(self, directory: Path, name: str = NODE_NAME, node_id: str | None = None):
        node_id = node_id or uuid.uuid4().hex[:8]
        self.node_id = node_id
        self.directory = directory
        self.name = name
        self.network = NodeNetwork(node_id)
        self.cgroup = NodeCgroup(node_id)
        self.containerd = Containerd(directory / "containerd", self.network, self.cgroup,
                                     images.PAUSE_IMAGE)
        self.kubelet = Kubelet(directory / "kubelet", name, self.network, self.cgroup,
                               self.containerd.endpoint)
        self.kube_proxy = KubeProxy(directory / "kube-proxy", name, self.network, self.cgroup)
        self.kube_router = KubeRouter(directory / "kube-router", name, self.network, self.cgroup)
        self._forwarder: Process | None = None
        self._started = False

    @property
    def node_ip(self) -> str:
        return self.network.node_ip

    @property
    def api_url(self) -> str:
        """The API server as the node and its pods reach it."""
        return f"https://{self.node_ip}:{API_FORWARD_PORT}"

    def prepare(self) -> None:
        """Choose the node's address before the API server's serving certificate is written."""
        self.network.choose_link()

    def pids(self) -> dict[str, int]:
        named = {"apiserver-forward": self._forwarder and self._forwarder.pid,
                 "containerd": self.containerd.pid, "kubelet": self.kubelet.pid,
                 "kube-proxy": self.kube_proxy.pid, "kube-router": self.kube_router.pid}
        return {name: pid for name, pid in named.items() if pid}

    def start(self, *, bin_dir: Path, kube_bin_dir: Path, ca: CertificateAuthority, ca_file: Path, apiserver_port: int,
              service_cidr: str, admin: kubernetes.client.ApiClient, log_dir: Path) -> Node:
        remove_stale_nodes()
        self._started = True
        self.directory.mkdir(parents=True, exist_ok=True)
        RECORDS_DIR.mkdir(parents=True, exist_ok=True)
        self._record.write_text(json.dumps({"owner_pid": os.getpid(), "directory": str(self.directory)}))
        archives = images.node_images(bin_dir)
        self.cgroup.create()
        self.network.start()
        self._forwarder = Process("apiserver-forward", [
            sys.executable, "-m", "kubeplane.apiforward", str(self.network.path), self.node_ip,
            str(API_FORWARD_PORT), str(apiserver_port)], log_dir / "apiserver-forward.log")
        wait_until_serving(self._forwarder, lambda: _accepts(self.node_ip, API_FORWARD_PORT),
                           f"the API forwarder on {self.node_ip}:{API_FORWARD_PORT}")
        self._publish_api_endpoint(admin)
        self.containerd.start(log_dir / "containerd.log")
        self.containerd.import_images(list(archives.values()))
        config = self.kubelet.write_files(ca, ca_file, self.api_url)
        kubelet = self.kubelet.start(kube_bin_dir / "kubelet", config, log_dir / "kubelet.log")
        wait_until_serving(kubelet, lambda: node_ready(admin, self.name), f"node {self.name} Ready")
        self._untaint_ready_node(admin)
        self.kube_proxy.start(kube_bin_dir / "kube-proxy", ca, ca_file.read_bytes(), self.api_url,
                              log_dir / "kube-proxy.log")
        if os.environ.get(NETWORK_POLICIES_ENV) != "0":
            self.kube_router.start(bin_dir / "kube-router", ca, ca_file.read_bytes(), self.api_url, service_cidr,
                                   admin, log_dir / "kube-router.log")
        return self

    def _untaint_ready_node(self, admin: kubernetes.client.ApiClient) -> None:
        """Remove the `not-ready` taint the kubelet registers with. The node lifecycle controller
        does that in a cluster; the plane does not run it (see plane.CONTROLLERS)."""
        core = kubernetes.client.CoreV1Api(admin)
        taints = core.read_node(self.name).spec.taints or []  # type: ignore[union-attr]
        kept = [t for t in taints if t.key != NOT_READY_TAINT]
        if len(kept) != len(taints):
            core.patch_node(self.name, {"spec": {"taints": [admin.sanitize_for_serialization(t)
                                                            for t in kept] or None}})

    def _publish_api_endpoint(self, admin: kubernetes.client.ApiClient) -> None:
        """Point the `kubernetes` Service at the forwarder (the API server's own endpoint
        reconciler is off: Endpoints may not hold its 127.0.0.1)."""
        kubernetes.client.DiscoveryV1Api(admin).create_namespaced_endpoint_slice("default", {  # type: ignore[arg-type]
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "kubeplane"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.node_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": API_FORWARD_PORT, "protocol": "TCP"}],
        })

    def delete_pods(self, admin: kubernetes.client.ApiClient, timeout: float = 30) -> None:
        """Delete every pod bound to the node at once (no grace period) and wait until the
        kubelet has stopped their sandboxes, which releases their addresses through CNI."""
        core = kubernetes.client.CoreV1Api(admin)
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items:
            try:
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace,  # type: ignore[arg-type, union-attr]
                                           grace_period_seconds=0)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
        wait_for(lambda: not self.containerd.ctr("tasks", "list", "--quiet").stdout.split(),
                 timeout=timeout, what=f"the pods of node {self.name} to stop")

    def stop(self, admin: kubernetes.client.ApiClient | None = None) -> None:
        """Stop the node; with `admin`, first delete its pods through the API so the kubelet tears
        them down the ordinary way. Raises PlaneError if anything is left behind."""
        if not self._started:
            return
        if admin is not None and self.kubelet.pid:
            try:
                self.delete_pods(admin)
            except (TimeoutError, kubernetes.client.ApiException, PlaneError) as error:
                print(f"kubeplane: {error}; removing the node's containers directly", file=sys.stderr)
        failures = []
        for step in (self.kube_router.stop, self.kube_proxy.stop, self.kubelet.stop, self._remove_containers,
                     self.containerd.stop, self.containerd.remove_network_results, self.cgroup.remove,
                     self._unmount, self.network.stop, self._stop_forwarder):
            try:
                step()
            except (PlaneError, OSError, subprocess.SubprocessError) as error:
                failures.append(f"{step.__qualname__}: {error}")
        self._started = False
        left = failures + self.leftovers()
        if left:
            raise PlaneError(f"node {self.name} did not stop cleanly: {'; '.join(left)}")
        self.containerd.remove_root()
        self._record.unlink(missing_ok=True)

    @property
    def _record(self) -> Path:
        return RECORDS_DIR / f"{self.node_id}.json"

    def _remove_containers(self) -> None:
        if self.containerd.pid:
            self.containerd.remove_containers()

    def _unmount(self) -> None:
        for mount_point in sorted(mounts_under(self.directory), key=len, reverse=True):
            subprocess.run(["umount", "--lazy", mount_point], capture_output=True)

    def _stop_forwarder(self) -> None:
        if self._forwarder:
            self._forwarder.stop()
            self._forwarder = None

    def leftovers(self) -> list[str]:
        """What of the node still exists, in words (empty when everything is gone)."""
        left = [f"process {pid} in cgroup {self.cgroup.name}" for pid in sorted(self.cgroup.pids())]
        left += [f"process {name} ({pid})" for name, pid in self.pids().items() if pid_alive(pid)]
        left += [f"mount {path}" for path in mounts_under(self.directory)]
        if self.network.exists():
            left.append(f"network namespace {self.network.name}")
        if subprocess.run(["ip", "link", "show", self.network.host_link],
                          capture_output=True).returncode == 0:
            left.append(f"interface {self.network.host_link}")
        if self.cgroup.exists():
            left.append(f"cgroup {self.cgroup.name}")
        left += [f"CNI result {path}" for path in self.containerd.network_results()]
        return left


def remove_stale_nodes() -> list[str]:
    """Remove the node of every record whose owner process is gone; return their ids."""
    removed = []
    for record in sorted(RECORDS_DIR.glob("*.json")) if RECORDS_DIR.is_dir() else []:
        try:
            state = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if pid_alive(state["owner_pid"]):
            continue
        stale = Node(Path(state["directory"]), node_id=record.stem)
        stale._started = True
        try:
            stale.stop()
        except PlaneError as error:
            print(f"kubeplane: stale {error}", file=sys.stderr)
            continue
        removed.append(record.stem)
    return removed
