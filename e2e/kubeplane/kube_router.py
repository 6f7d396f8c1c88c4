"""kube-router's network-policy controller, inside the node's network namespace: it enforces every
NetworkPolicy for the pods on the node with iptables and ipset (the CNI bridge ignores them), and
its chains and sets vanish with the namespace. Only the firewall runs: no routing (one node, the
bridge routes), no service proxy (kube-proxy serves Services)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes

from .kube_proxy import NodeDaemon
from .kubeconfig import kubeconfig, write_kubeconfig
from .pki import CertificateAuthority
from .process import Process, healthz_ok, wait_until_serving

KUBE_ROUTER_USER = "system:kube-router"
ROLE_NAME = "kubeplane:kube-router"
HEALTH_PORT = 20244
"""kube-router's default health port; it binds every address of the node's namespace."""
TOP_LEVEL_CHAINS = ("KUBE-ROUTER-INPUT", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-OUTPUT")
ROLE_RULES = [
    {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]},
]
"""What kube-router v2.1.0 reads: it starts informers for all of these before its controllers."""


def grant_reads(admin: kubernetes.client.ApiClient) -> None:
    """A ClusterRole with kube-router's reads, bound to its user (no default role covers them)."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": ROLE_NAME}, "rules": ROLE_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": ROLE_NAME},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE_NAME},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_ROUTER_USER}]}
    for create, body in ((rbac.create_cluster_role, role), (rbac.create_cluster_role_binding, binding)):
        try:
            create(body)  # type: ignore[arg-type]
        except kubernetes.client.ApiException as error:
            if error.status != 409:
                raise


class KubeRouter(NodeDaemon):

    def start(self, binary: Path, ca: CertificateAuthority, ca_pem: bytes, api_url: str, service_cidr: str,
              admin: kubernetes.client.ApiClient, log_path: Path) -> KubeRouter:
        self.directory.mkdir(parents=True, exist_ok=True)
        grant_reads(admin)
        # Traffic between two pods on the bridge passes iptables only with this (per namespace).
        subprocess.run(self.network.enter(["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"]),
                       check=True, capture_output=True)
        client = ca.client_pair(KUBE_ROUTER_USER)
        config_path = write_kubeconfig(self.directory / "kubeconfig", kubeconfig(
            api_url, ca_pem, KUBE_ROUTER_USER, cert_pem=client.cert_pem, key_pem=client.key_pem))
        self._process = Process("kube-router", self.network.enter([
            str(binary), f"--kubeconfig={config_path}", f"--hostname-override={self.node_name}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            f"--service-cluster-ip-range={service_cidr}", f"--health-port={HEALTH_PORT}",
            "--iptables-sync-period=30s", "--v=1"]), log_path)
        self.cgroup.add_daemon(self._process.pid)
        # /healthz answers once its informers have synced; the top-level chains follow at once.
        wait_until_serving(self._process, lambda: healthz_ok(self.network.node_ip, HEALTH_PORT) and self._chains_installed(),
                           f"kube-router /healthz on {self.network.node_ip}:{HEALTH_PORT} and its chains")
        return self

    def _filter_rules(self) -> str:
        return subprocess.run(self.network.enter(["iptables-save", "-t", "filter"]),
                              capture_output=True, text=True).stdout

    def _chains_installed(self) -> bool:
        rules = self._filter_rules()
        return all(f"-j {chain}" in rules for chain in TOP_LEVEL_CHAINS)

    def enforces(self, pod_ip: str, *, egress: bool) -> bool:
        """Whether the pod at `pod_ip` has its firewall chain for its ingress (or `egress`): from
        then on its NetworkPolicies hold; before, a new pod's traffic passes unfiltered."""
        match = f"-s {pod_ip}/32" if egress else f"-d {pod_ip}/32"
        return any(match in line and "-j KUBE-POD-FW-" in line for line in self._filter_rules().splitlines())
