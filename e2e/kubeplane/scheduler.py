"""kube-scheduler for ordinary pods (the default scheduler), on the host's loopback like the rest
of the control plane."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .kubeconfig import kubeconfig, write_kubeconfig
from .pki import CertificateAuthority
from .process import Process, free_ports, wait_until_serving

SCHEDULER_USER = "system:kube-scheduler"
"""Bound to the system:kube-scheduler ClusterRole by the API server's default RBAC."""


class Scheduler:
    def __init__(self, directory: Path):
        self.directory = directory
        self.port: int | None = None
        self._process: Process | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, binary: Path, ca: CertificateAuthority, ca_pem: bytes, api_url: str,
              log_path: Path, healthy: Callable[[int], bool]) -> Scheduler:
        """`healthy(port)` probes /healthz on the scheduler's secure port with the plane's CA."""
        self.directory.mkdir(parents=True, exist_ok=True)
        client = ca.client_pair(SCHEDULER_USER)
        config = write_kubeconfig(self.directory / "kubeconfig", kubeconfig(
            api_url, ca_pem, "kube-scheduler", cert_pem=client.cert_pem, key_pem=client.key_pem))
        cert, key = ca.serving_pair("kube-scheduler", ["localhost"], ["127.0.0.1"]).write(
            self.directory, "serving")
        [port] = free_ports(1)
        self.port = port
        self._process = Process("kube-scheduler", [
            str(binary), f"--kubeconfig={config}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
            "--leader-elect=false", "--profiling=false",
        ], log_path)
        wait_until_serving(self._process, lambda: healthy(port),
                           f"kube-scheduler /healthz on port {port}")
        return self

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None
