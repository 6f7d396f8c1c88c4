"""The node's network: a network namespace of its own, joined to the host by one veth pair.

Everything the node does to networking happens inside it: the CNI bridge and pod veths, kube-proxy's
and the bridge plugin's iptables rules, the sysctls kube-proxy sets. Deleting the namespace removes
all of that at once, and two planes with nodes never see each other's rules or ports (each node's
kubelet listens on :10250 in its own namespace). The host reaches the node at `node_ip` through
the veth, which is how the API server calls the kubelet for logs and exec.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from pathlib import Path

from .process import PlaneError

LINK_RANGE = ipaddress.IPv4Network("172.30.0.0/16")
"""Each node takes one /30 of this for its veth pair (host .1, node .2)."""
NETNS_DIR = Path("/run/netns")


def _run(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode:
        raise PlaneError(f"`{' '.join(args)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _addresses_in_use() -> list[ipaddress.IPv4Network]:
    links = json.loads(_run("ip", "-j", "-4", "addr", "show"))
    return [ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False)
            for link in links for a in link.get("addr_info", [])]


class NodeNetwork:
    """The namespace `kubeplane-<id>` with `eth0` at `node_ip`, and host link `kp-<id>` at `host_ip`."""

    def __init__(self, plane_id: str):
        self.name = f"kubeplane-{plane_id}"
        self.host_link = f"kp-{plane_id}"
        self.link: ipaddress.IPv4Network | None = None

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def host_ip(self) -> str:
        return str(self._chosen_link()[1])

    @property
    def node_ip(self) -> str:
        return str(self._chosen_link()[2])

    def _chosen_link(self) -> ipaddress.IPv4Network:
        if self.link is None:
            raise PlaneError(f"no link chosen for {self.name} yet (choose_link first)")
        return self.link

    def choose_link(self) -> None:
        """Pick a /30 no interface on the host uses (before start: the apiserver's certificate
        names `node_ip`)."""
        used = _addresses_in_use()
        candidates: list[ipaddress.IPv4Network] = list(LINK_RANGE.subnets(new_prefix=30))
        for link in random.sample(candidates, 64):
            if not any(link.overlaps(other) for other in used):
                self.link = link
                return
        raise PlaneError(f"no free /30 for a node link in {LINK_RANGE}")

    def start(self) -> NodeNetwork:
        if self.link is None:
            self.choose_link()
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "eth0",
                 "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
            _run("ip", "link", "set", self.host_link, "up")
            for command in (
                ["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", f"{self.node_ip}/30", "dev", "eth0"],
                ["ip", "link", "set", "eth0", "up"],
                ["ip", "route", "add", "default", "via", self.host_ip],
                # Pods reach Services through this namespace's routing and kube-proxy's NAT.
                ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            ):
                _run(*self.enter(command))
        except PlaneError:
            self.stop()
            raise
        return self

    def enter(self, command: list[str]) -> list[str]:
        """`command` run inside the namespace. nsenter joins the network namespace only (unlike
        `ip netns exec`, which also makes a mount namespace): containerd and the kubelet must see
        each other's mounts."""
        return ["nsenter", f"--net={self.path}", "--", *command]

    def exists(self) -> bool:
        return self.path.exists()

    def stop(self) -> None:
        """Delete the namespace (its interfaces, iptables rules and the veth pair go with it)."""
        if self.exists():
            subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.host_link], capture_output=True)
