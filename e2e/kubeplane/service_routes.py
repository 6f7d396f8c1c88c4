"""How the host's kube-apiserver reaches a Service inside the node's network namespace.

For a webhook given as a Service reference the API server resolves the Service to its ClusterIP
(kube-apiserver's default service resolver; `--enable-aggregator-routing` would pick an endpoint's
pod IP instead) and dials it from the host. ClusterIPs exist only in kube-proxy's iptables rules
inside the node's namespace, so the host needs a route: `<clusterIP>/32 via <node_ip>` on the
node's veth. The packet enters the namespace, kube-proxy's PREROUTING rules DNAT it to a pod on the
CNI bridge, and the reply goes back through the namespace's default route to the host, where
conntrack restores the ClusterIP. One /32 per Service, not the whole Service range: every plane
uses the same range, and planes with nodes run side by side on one machine. The route lives on the
node's veth, so it goes away with the node.
"""

from __future__ import annotations

import subprocess

from .node import Node
from .process import PlaneError


def route_service_to_node(node: Node, cluster_ip: str) -> None:
    """Send the host's traffic for `cluster_ip` into the node's namespace."""
    result = subprocess.run(["ip", "route", "replace", f"{cluster_ip}/32", "via", node.node_ip,
                             "dev", node.network.host_link], capture_output=True, text=True)
    if result.returncode:
        raise PlaneError(f"cannot route {cluster_ip} to node {node.name}: {result.stderr.strip()}")


def remove_service_route(node: Node, cluster_ip: str) -> None:
    subprocess.run(["ip", "route", "delete", f"{cluster_ip}/32", "dev", node.network.host_link],
                   capture_output=True)
