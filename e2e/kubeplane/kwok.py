"""kwok (sigs.k8s.io/kwok) as the kubelet of the SIMULATED GPU nodes (kubeplane.gpu_nodes).

It manages only nodes annotated `kwok.x-k8s.io/node=fake`: marks them Ready, renews their leases,
and plays the lifecycle of pods bound to them with kwok's default stages (pod-ready, pod-complete,
pod-delete): such a pod becomes Running without a container, and a deleted one goes away, which
frees its GPUs for the scheduler. Real nodes of the plane are left alone.
"""

from __future__ import annotations

from .components import start_component
from .gpu_nodes import KWOK_NODE_ANNOTATION
from .plane import ControlPlane
from .process import Process, free_ports

POD_CIDR = "10.250.0.0/16"
"""Pod IPs kwok hands out on the simulated nodes; outside the plane's Service CIDR (10.0.0.0/16,
which kwok's default 10.0.0.1/24 would overlap) and any real node's pod network."""
NODE_LEASE_SECONDS = 40
"""As a kubelet does: the node lifecycle controller, where it runs, sees the nodes alive."""


class Kwok:
    """The kwok controller of one plane: `Kwok().start(plane)`, then `stop()`; or
    `with Kwok().start(plane):`."""

    def __init__(self) -> None:
        self._process: Process | None = None

    def start(self, plane: ControlPlane) -> Kwok:
        """Start kwok and wait for its /healthz, which answers once its controllers watch the API."""
        home = plane.directory / "kwok"
        home.mkdir(exist_ok=True)
        [port] = free_ports(1)
        key, value = KWOK_NODE_ANNOTATION
        self._process = start_component(plane, "kwok", plane.bin_dir / "kwok", [
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--cidr={POD_CIDR}", f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--server-address=127.0.0.1:{port}",
        ], ready_port=port, ready_path="/healthz",
            # kwok also loads ~/.kwok/kwok.yaml when it exists: a user's file must not change the plane.
            env={"HOME": str(home)})
        return self

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None

    def __enter__(self) -> Kwok:
        return self

    def __exit__(self, *_) -> None:
        self.stop()
