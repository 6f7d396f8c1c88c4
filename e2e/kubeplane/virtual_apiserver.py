"""Another kube-apiserver on the plane's etcd, under its own prefix: a separate API with its own
objects, CRDs and service-account signing key (see ControlPlane.start_virtual_apiserver)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import kubernetes

from .apiserver import APIServerFiles
from .kubeconfig import file_stem, kubeconfig, write_kubeconfig
from .process import Process, free_ports

if TYPE_CHECKING:
    from .plane import ControlPlane



class VirtualAPIServer:
    """A kube-apiserver sharing the plane's etcd and CA; see ControlPlane.start_virtual_apiserver."""

    def __init__(self, plane: ControlPlane, name: str):
        self.name = name
        self.etcd_prefix = f"/vcluster-{name}"
        self._plane = plane
        self._files = APIServerFiles(plane.directory / "virtual" / name)
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
            plane.kube_bin_dir / "kube-apiserver", self.port, plane.etcd_url, self.etcd_prefix,
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

