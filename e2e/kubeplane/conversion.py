"""The GpuTenant CRD's conversion webhook for planes whose operator does not serve one.

A real cluster always has the operator's conversion webhook behind the CRD (the chart's operator
serves it: `gputenant run --webhook-conversion-port`). Many tests here run no operator, or one
without that flag, yet read GpuTenants through the version kubectl and Argo CD prefer (v1beta1)
while they are stored as v1alpha1. For them this process serves the operator's own conversion
endpoint (`guard.conversion.ConversionServer`, answering with `api.conversion.review`), once per
test process, and `install_crds` points every GpuTenant CRD it installs at it.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
import threading
from pathlib import Path

import kubernetes

from gputenant.api.crd import conversion
from gputenant.guard.certs import CertificatePaths, ensure_certificates
from gputenant.guard.conversion import CRD_NAME, ConversionServer

from .process import free_ports

HOST = "127.0.0.1"
"""Every plane's API server runs on this machine's loopback, as the tests' guards do."""


class _Served:
    """The conversion server on its own event loop in a daemon thread, for the process's lifetime."""

    def __init__(self) -> None:
        directory = Path(tempfile.mkdtemp(prefix="kubeplane-conversion-"))
        ensure_certificates(directory, [HOST])
        paths = CertificatePaths.in_directory(directory)
        self.ca_bundle = base64.b64encode(paths.ca_bundle.read_bytes()).decode()
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self.server = ConversionServer(HOST, self.port, paths.cert, paths.key)
        threading.Thread(target=self.loop.run_forever, name="conversion-webhook", daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=30)

    @property
    def client_config(self) -> dict:
        return {"url": f"https://{HOST}:{self.port}/convert", "caBundle": self.ca_bundle}


_served: _Served | None = None
_lock = threading.Lock()


def served() -> _Served:
    global _served
    with _lock:
        if _served is None:
            _served = _Served()
        return _served


def point_tenant_crd_here(client: kubernetes.client.ApiClient) -> None:
    """Point the GpuTenant CRD's conversion webhook at this process's server (a merge patch: the
    chart's `service` reference, if any, is removed)."""
    patch = conversion({"service": None, **served().client_config})
    kubernetes.client.ApiextensionsV1Api(client).patch_custom_resource_definition(
        CRD_NAME, {"spec": {"conversion": patch}})
