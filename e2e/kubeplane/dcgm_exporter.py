"""A stand-in for NVIDIA's dcgm-exporter with its pod mapping on: DCGM-format per-GPU series
(DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED with gpu, UUID, Hostname,
modelName, namespace, pod, container labels) whose values the tests set. GPU hardware is the one
thing the tests simulate; the Prometheus that scrapes this is real (kubeplane/prometheus.py).

Usage::

    with DcgmExporter([SimulatedGpu("tenant-a", "train-0", "GPU-1", sm_active=0.008, gpu_util=100)]) as exporter:
        Prometheus(work_dir, targets=[exporter.address])
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .process import free_ports

LABELS = ["gpu", "UUID", "Hostname", "modelName", "namespace", "pod", "container"]


@dataclass
class SimulatedGpu:
    """One GPU a pod holds, as dcgm-exporter reports it."""

    namespace: str
    pod: str
    uuid: str
    sm_active: float
    """DCGM_FI_PROF_SM_ACTIVE, 0..1."""
    gpu_util: float
    """DCGM_FI_DEV_GPU_UTIL, percent."""
    fb_used_mib: float = 1024.0
    hostname: str = "gpu-node-0"
    model: str = "NVIDIA H100 80GB HBM3"


class DcgmExporter(Collector):
    def __init__(self, gpus: list[SimulatedGpu]):
        self.gpus = gpus
        self.address = ""
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def collect(self) -> Iterator[Metric]:
        for name, value in (("DCGM_FI_PROF_SM_ACTIVE", lambda g: g.sm_active),
                            ("DCGM_FI_DEV_GPU_UTIL", lambda g: g.gpu_util),
                            ("DCGM_FI_DEV_FB_USED", lambda g: g.fb_used_mib)):
            family = GaugeMetricFamily(name, f"{name} (simulated GPU)", labels=LABELS)
            for index, gpu in enumerate(self.gpus):
                family.add_metric([str(index), gpu.uuid, gpu.hostname, gpu.model, gpu.namespace, gpu.pod, "main"],
                                  value(gpu))
            yield family

    def __enter__(self) -> DcgmExporter:
        registry = CollectorRegistry()
        registry.register(self)
        port = free_ports(1)[0]
        self._server, self._thread = start_http_server(port, "127.0.0.1", registry=registry)
        self.address = f"127.0.0.1:{port}"
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
