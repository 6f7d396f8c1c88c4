"""MetalLB (go.universe.tf/metallb v0.15.2, the version tools/metallb/go.mod pins) in L2 mode on the plane's
node: a real load-balancer implementation, so a Service of type LoadBalancer gets an address that
the host, outside the node's network namespace, reaches.

- The controller runs on the host against the plane's API server (a component like KAI's): it
  assigns each LoadBalancer Service an address of an IPAddressPool (status.loadBalancer.ingress).
- The speaker runs inside the node's network namespace (`NodeNetwork.enter`, like kube-proxy):
  memberlist off (no --ml-bindaddr: the one node is the only speaker), it answers ARP on the node's
  `eth0` for the addresses it announces; as root it has NET_RAW.
- The pool is a /29 of the node links' range (netns.LINK_RANGE) that no host address or route
  uses, routed on the host as on-link through the node's veth (`kp-<id>`). The host therefore asks
  by ARP who has an address of it, the speaker answers with `eth0`'s MAC, and kube-proxy inside the
  namespace forwards what arrives to the Service's endpoints. That is MetalLB's L2 mode: nothing
  but ARP tells the host where the address is.
- Its CRDs come from the module cache (config/crd/bases of the module), never copied.

`MetalLB(plane).start()` runs both processes; `add_pool()` writes the IPAddressPool and the
L2Advertisement (separately, so a test can see a Service wait for an address first); `stop()`
removes the processes, the pool objects and the host route.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from .components import start_component
from .fixtures import install_crds
from .images import PAUSE_IMAGE
from .kubeconfig import kubeconfig, write_kubeconfig
from .netns import LINK_RANGE
from .plane import ControlPlane
from .process import PlaneError, Process, free_ports, healthz_ok, wait_until_serving
from .tools import REPO_ROOT

MODULE = "go.universe.tf/metallb"
TOOLS_MODULE_DIR = REPO_ROOT / "tools" / "metallb"
NAMESPACE = "metallb-system"
POOL_NAME = "kubeplane"
GROUP, VERSION = "metallb.io", "v1beta1"
SPEAKER_USER = "metallb-speaker"
SPEAKER_POD = "metallb-speaker"
SPEAKER_METRICS_PORT = 7472
"""The speaker's default metrics port, bound to the node's address in its own namespace."""
POOL_PREFIX = 29
"""Eight addresses: enough for a few LoadBalancer Services of one test module."""


def crd_dir() -> Path:
    """config/crd/bases of the pinned module, from the Go module cache (downloaded again through the
    module proxy if the cache was cleaned). Read in place, never copied."""
    result = subprocess.run(["go", "mod", "download", "-json", MODULE], cwd=TOOLS_MODULE_DIR,
                            capture_output=True, text=True, check=True)
    return Path(json.loads(result.stdout)["Dir"]) / "config" / "crd" / "bases"


def install_metallb_crds(plane: ControlPlane) -> list[str]:
    """IPAddressPool, L2Advertisement and MetalLB's other CRDs, Established."""
    return [name for path in sorted(crd_dir().glob("*.yaml")) for name in install_crds(plane, path)]


def _ip_json(*args: str) -> list[dict]:
    return json.loads(subprocess.run(["ip", "-j", "-4", *args], capture_output=True, text=True, check=True).stdout)


def choose_pool() -> ipaddress.IPv4Network:
    """A /29 of LINK_RANGE that no host address and no host route overlaps (other planes' node
    links and pools included)."""
    used = [ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
            for link in _ip_json("addr", "show") for a in link.get("addr_info", [])]
    used += [ipaddress.ip_network(route["dst"]) for route in _ip_json("route", "show")
             if route.get("dst", "default") != "default"]
    for pool in LINK_RANGE.subnets(new_prefix=POOL_PREFIX):
        if not any(pool.overlaps(other) for other in used):
            return pool
    raise PlaneError(f"no free /{POOL_PREFIX} for a load-balancer pool in {LINK_RANGE}")


class MetalLB:
    """MetalLB's controller and speaker for `plane`'s node, with an address pool routed to it."""

    def __init__(self, plane: ControlPlane):
        if plane.node is None:
            raise PlaneError("MetalLB needs a plane with a node (ControlPlane(node=True))")
        self.plane = plane
        self.network = plane.node.network
        self.pool: ipaddress.IPv4Network | None = None
        self._processes: list[Process] = []

    def start(self) -> MetalLB:
        install_metallb_crds(self.plane)
        self.plane.kubectl("create", "namespace", NAMESPACE, check=False)
        self.pool = choose_pool()
        # on-link through the node's veth: the host resolves pool addresses by ARP, which the speaker answers
        subprocess.run(["ip", "route", "add", str(self.pool), "dev", self.network.host_link, "scope", "link",
                        "src", self.network.host_ip], capture_output=True, text=True, check=True)
        try:
            self._start_controller()
            self._start_speaker()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_controller(self) -> None:
        # v0.15.2 serves /metrics (its only HTTP endpoint) on every address of the host at --port
        [metrics] = free_ports(1)
        self._processes.append(start_component(
            self.plane, "metallb-controller", self.plane.bin_dir / "metallb-controller",
            [f"--namespace={NAMESPACE}", f"--port={metrics}", "--webhook-mode=disabled"],
            ready_port=metrics, ready_path="/metrics"))

    def _start_speaker(self) -> None:
        node = self.plane.require_node()
        directory = node.directory / "metallb-speaker"
        pair = self.plane.ca.client_pair(SPEAKER_USER, ["system:masters"])
        config_path = write_kubeconfig(directory / "kubeconfig", kubeconfig(
            node.api_url, self.plane.ca_pem, SPEAKER_USER, cert_pem=pair.cert_pem, key_pem=pair.key_pem))
        self._create_speaker_pod()
        speaker = Process("metallb-speaker", self.network.enter([
            "env", f"KUBECONFIG={config_path}", str(self.plane.bin_dir / "metallb-speaker"),
            f"--namespace={NAMESPACE}", f"--node-name={node.name}", f"--pod-name={SPEAKER_POD}",
            f"--host={self.network.node_ip}", f"--port={SPEAKER_METRICS_PORT}"]),
            self.plane.log_dir / "metallb-speaker.log")
        self._processes.append(speaker)
        node.cgroup.add_daemon(speaker.pid)
        wait_until_serving(speaker, lambda: healthz_ok(self.network.node_ip, SPEAKER_METRICS_PORT, "/metrics"),
                           f"metallb-speaker /metrics on {self.network.node_ip}:{SPEAKER_METRICS_PORT}")

    def _create_speaker_pod(self) -> None:
        """The Pod the speaker reads as itself at start (v0.15.2 owns its ServiceL2Status objects by
        it). The speaker is a host process here, so this Pod only names it: no scheduler has its
        schedulerName, so it is never placed and never runs."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": SPEAKER_POD, "namespace": NAMESPACE},
               "spec": {"schedulerName": "kubeplane-host-process",
                        "containers": [{"name": "speaker", "image": PAUSE_IMAGE}]}}
        with self.plane.api_client() as client:
            kubernetes.client.CoreV1Api(client).create_namespaced_pod(NAMESPACE, pod)  # type: ignore[arg-type]

    def add_pool(self) -> None:
        """The IPAddressPool of the routed /29 (network and broadcast addresses left out) and an
        L2Advertisement from the real node only: the kwok nodes run no speaker."""
        assert self.pool is not None, "start() first"
        hosts = list(self.pool.hosts())
        pool = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAddressPool",
                "metadata": {"name": POOL_NAME, "namespace": NAMESPACE},
                "spec": {"addresses": [f"{hosts[0]}-{hosts[-1]}"]}}
        advertisement = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "L2Advertisement",
                         "metadata": {"name": POOL_NAME, "namespace": NAMESPACE},
                         "spec": {"ipAddressPools": [POOL_NAME],
                                  "nodeSelectors": [{"matchLabels": {
                                      "kubernetes.io/hostname": self.plane.require_node().name}}]}}
        with self.plane.api_client() as client:
            custom = kubernetes.client.CustomObjectsApi(client)
            for body, plural in ((pool, "ipaddresspools"), (advertisement, "l2advertisements")):
                custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        self.plane.kubectl("delete", "pod", SPEAKER_POD, "-n", NAMESPACE, "--ignore-not-found", "--wait=false",
                           check=False)
        for plural in ("l2advertisements", "ipaddresspools"):
            self.plane.kubectl("delete", f"{plural}.{GROUP}", POOL_NAME, "-n", NAMESPACE, "--ignore-not-found",
                               check=False)
        if self.pool is not None:
            subprocess.run(["ip", "route", "delete", str(self.pool), "dev", self.network.host_link],
                           capture_output=True)
            self.pool = None


@pytest.fixture(scope="module")
def metallb(node_plane: ControlPlane) -> Iterator[MetalLB]:
    """Opt in per module (`from kubeplane.metallb import metallb`): MetalLB on the session's node
    plane, without a pool until the test calls `add_pool()`; stopped, pool and route removed, when
    the module ends."""
    running = MetalLB(node_plane).start()
    yield running
    running.stop()
