"""The real KAI-Scheduler (github.com/NVIDIA/KAI-scheduler, the version tools/build.sh pins) as
processes against a plane, with the CRDs shipped in that module version.

In a cluster KAI's operator deploys these components from a Config CR; here each binary runs with
the flags that deployment would give it, on loopback ports, with its webhooks off (they only
validate Queue and PodGroup objects, and need serving certificates and webhook configurations):

- pod-grouper: makes a PodGroup for each pod with `schedulerName: kai-scheduler`, in the queue
  named by the pod's `kai.scheduler/queue` label;
- scheduler: allocates PodGroups to nodes within their queues' quota and limit, reclaims and
  preempts, and writes why a PodGroup waits (PodGroup status, pod condition and event);
- binder: binds the pods the scheduler allocated (through BindRequest objects);
- queue controller and pod-group controller: keep Queue and PodGroup status.

Nothing here is simulated; the nodes KAI schedules onto may be (kubeplane.gpu_nodes).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .components import start_component
from .fixtures import install_crds
from .plane import ControlPlane
from .process import Process, free_ports
from .tools import REPO_ROOT, pinned_versions

MODULE = "github.com/NVIDIA/KAI-scheduler"
TOOLS_MODULE_DIR = REPO_ROOT / "tools" / "kai"
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
"""The pod label the pod-grouper reads the queue from (its --queue-label-key default)."""


def crd_dir() -> Path:
    """`deployments/kai-scheduler/crds` of the pinned module, from the Go module cache (downloaded
    again through the module proxy if the cache was cleaned). Read in place, never copied."""
    version = pinned_versions()["kai"]
    result = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{version}"],
                            cwd=TOOLS_MODULE_DIR, capture_output=True, text=True, check=True)
    return Path(json.loads(result.stdout)["Dir"]) / "deployments" / "kai-scheduler" / "crds"


def install_kai_crds(plane: ControlPlane) -> list[str]:
    """Queue, PodGroup, BindRequest and KAI's own config CRDs, Established."""
    return [name for path in sorted(crd_dir().glob("*.yaml")) for name in install_crds(plane, path)]


class KaiScheduler:
    """KAI's five components on one plane: `KaiScheduler().start(plane)`, then `stop()`."""

    def __init__(self) -> None:
        self._processes: list[Process] = []

    def start(self, plane: ControlPlane) -> KaiScheduler:
        """Install the CRDs, then start each component and wait until it serves its probe."""
        install_kai_crds(plane)
        try:
            self._start_controllers(plane)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_controllers(self, plane: ControlPlane) -> None:
        scheduler = f"--scheduler-name={SCHEDULER_NAME}"

        def run(component: str, args: list[str], ready_port: int, ready_path: str) -> None:
            self._processes.append(start_component(
                plane, f"kai-{component}", plane.bin_dir / f"kai-{component}", args,
                ready_port=ready_port, ready_path=ready_path))

        [metrics] = free_ports(1)
        run("queuecontroller", ["--enable-webhook=false", f"--queue-label-key={QUEUE_LABEL}",
                                f"--metrics-listen-address=127.0.0.1:{metrics}"], metrics, "/metrics")
        for component, extra in (
            ("podgroupcontroller", ["--enable-podgroup-webhook=false"]),
            ("podgrouper", [f"--queue-label-key={QUEUE_LABEL}"]),
            ("binder", []),
        ):
            # The binder registers no health checks, so its probe server answers 404 to everything;
            # every one of them serves /metrics once its manager runs.
            metrics, probe = free_ports(2)
            run(component, [scheduler, *extra, f"--metrics-bind-address=127.0.0.1:{metrics}",
                            f"--health-probe-bind-address=127.0.0.1:{probe}"], metrics, "/metrics")
        # The scheduler serves /metrics once it is built; its plugin server takes a port of its own
        # and, in this version, binds it on every interface (the flag sets only the port).
        metrics, plugins = free_ports(2)
        run("scheduler", [scheduler, f"--listen-address=127.0.0.1:{metrics}",
                          f"--plugin-server-port={plugins}"], metrics, "/metrics")

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
