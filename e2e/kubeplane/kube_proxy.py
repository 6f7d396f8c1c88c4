"""kube-proxy in iptables mode, inside the node's network namespace: Service ClusterIPs work from
pods and from the node's own namespace, and its rules vanish with the namespace."""

from __future__ import annotations

import json
from pathlib import Path

from .cgroups import NodeCgroup
from .containerd import POD_CIDR
from .kubeconfig import kubeconfig, write_kubeconfig
from .netns import NodeNetwork
from .pki import CertificateAuthority
from .process import Process, healthz_ok, wait_until_serving

KUBE_PROXY_USER = "system:kube-proxy"
"""Bound to the system:node-proxier ClusterRole by the API server's default RBAC."""
HEALTHZ_PORT = 10256


def kube_proxy_config(*, kubeconfig_path: Path, node_name: str, node_ip: str) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clusterCIDR": POD_CIDR, "hostnameOverride": node_name,
        "clientConnection": {"kubeconfig": str(kubeconfig_path)},
        "bindAddress": node_ip, "healthzBindAddress": f"{node_ip}:{HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        # Leave the kernel's conntrack table size and timeouts alone: they are not the node's.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
    }


class NodeDaemon:
    """A node process with its own directory, run in the node's namespace and cgroup."""

    def __init__(self, directory: Path, node_name: str, network: NodeNetwork, cgroup: NodeCgroup):
        self.directory = directory
        self.node_name = node_name
        self.network = network
        self.cgroup = cgroup
        self._process: Process | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None


class KubeProxy(NodeDaemon):

    def start(self, binary: Path, ca: CertificateAuthority, ca_pem: bytes, api_url: str,
              log_path: Path) -> KubeProxy:
        self.directory.mkdir(parents=True, exist_ok=True)
        client = ca.client_pair(KUBE_PROXY_USER)
        config_path = write_kubeconfig(self.directory / "kubeconfig", kubeconfig(
            api_url, ca_pem, KUBE_PROXY_USER, cert_pem=client.cert_pem, key_pem=client.key_pem))
        config = self.directory / "config.yaml"
        config.write_text(json.dumps(kube_proxy_config(
            kubeconfig_path=config_path, node_name=self.node_name, node_ip=self.network.node_ip)))
        self._process = Process("kube-proxy", self.network.enter(
            [str(binary), f"--config={config}"]), log_path)
        self.cgroup.add_daemon(self._process.pid)
        # /healthz answers 200 once the first full sync has written the rules.
        wait_until_serving(self._process, lambda: healthz_ok(self.network.node_ip, HEALTHZ_PORT),
                           f"kube-proxy /healthz on {self.network.node_ip}:{HEALTHZ_PORT}")
        return self
