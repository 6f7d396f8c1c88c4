"""The node's kubelet (v1.35.4), inside the node's network namespace, with its root directory, pod
logs and cgroups (`cgroupRoot`) of its own, so two planes' kubelets never share state.

Credentials come from the plane's CA: a client certificate for `system:node:<name>` in
`system:nodes` (the Node authorizer and NodeRestriction admit exactly that), and a serving
certificate for the node's address, which the API server verifies when it proxies `kubectl logs`
and `exec` (--kubelet-certificate-authority). The kubelet authenticates the API server's client
certificate with the same CA and authorizes it by SubjectAccessReview.
"""

from __future__ import annotations

import json
from pathlib import Path

from .cgroups import NodeCgroup
from .kubeconfig import kubeconfig, write_kubeconfig
from .netns import NodeNetwork
from .pki import CertificateAuthority
from .process import Process

KUBELET_PORT = 10250


def kubelet_config(*, node_ip: str, ca_file: Path, serving: tuple[Path, Path], cgroup_root: str,
                   runtime_endpoint: str, pod_logs_dir: Path) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # This machine kind: cgroup v1 (hybrid), no systemd, swap allowed to exist.
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "cgroupRoot": cgroup_root, "containerRuntimeEndpoint": runtime_endpoint,
        "address": node_ip, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": node_ip, "healthzPort": 10248,
        "tlsCertFile": str(serving[0]), "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(pod_logs_dir),
        "resolvConf": "",
        # The disk is shared with everyone's builds: never evict or collect images for disk space.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%",
                         "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
    }


class Kubelet:
    def __init__(self, directory: Path, name: str, network: NodeNetwork, cgroup: NodeCgroup,
                 runtime_endpoint: str):
        self.directory = directory
        self.name = name
        self.network = network
        self.cgroup = cgroup
        self.runtime_endpoint = runtime_endpoint
        self._process: Process | None = None

    @property
    def root_dir(self) -> Path:
        """Pod volumes (service-account token tmpfs mounts among them) live here."""
        return self.directory / "root"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def write_files(self, ca: CertificateAuthority, ca_file: Path, api_url: str) -> Path:
        """The kubelet's kubeconfig, certificates and configuration; returns the configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        client = ca.client_pair(f"system:node:{self.name}", ["system:nodes"])
        write_kubeconfig(self.directory / "kubeconfig", kubeconfig(
            api_url, ca_file.read_bytes(), f"system:node:{self.name}",
            cert_pem=client.cert_pem, key_pem=client.key_pem))
        serving = ca.serving_pair(f"system:node:{self.name}", [self.name],
                                  [self.network.node_ip]).write(self.directory, "serving")
        config = self.directory / "config.yaml"
        config.write_text(json.dumps(kubelet_config(
            node_ip=self.network.node_ip, ca_file=ca_file, serving=serving,
            cgroup_root=self.cgroup.root, runtime_endpoint=self.runtime_endpoint,
            pod_logs_dir=self.directory / "pods-logs"), indent=2))
        return config

    def start(self, binary: Path, config: Path, log_path: Path) -> Process:
        self._process = Process("kubelet", self.network.enter([
            str(binary), f"--config={config}", f"--kubeconfig={self.directory / 'kubeconfig'}",
            f"--root-dir={self.root_dir}", f"--hostname-override={self.name}",
            f"--node-ip={self.network.node_ip}", "--v=1",
        ]), log_path)
        self.cgroup.add_daemon(self._process.pid)
        return self._process

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None
