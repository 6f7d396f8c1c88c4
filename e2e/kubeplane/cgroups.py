"""One cgroup per node, `/kubeplane-<id>` in every mounted hierarchy: the kubelet's cgroupRoot
(pods go under `kubepods/`) and, in `daemons/`, containerd, its shims, the kubelet and kube-proxy.

Whatever runs for the node is therefore inside it, which is how stop() finds and ends every last
process (a shim or container that outlived its parent included) and then removes the cgroups.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .process import PlaneError


def hierarchies() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies and of cgroup2 (hybrid or unified layout)."""
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount_point, fs_type, *_ = line.split()
        if fs_type in ("cgroup", "cgroup2"):
            mounts.append(Path(mount_point))
    return mounts


class NodeCgroup:
    def __init__(self, plane_id: str):
        self.name = f"kubeplane-{plane_id}"
        self.daemons = f"{self.name}/daemons"

    @property
    def root(self) -> str:
        """The kubelet's cgroupRoot."""
        return f"/{self.name}"

    def create(self) -> None:
        for hierarchy in hierarchies():
            for relative in (self.name, self.daemons):
                directory = hierarchy / relative
                directory.mkdir(exist_ok=True)
                # A v1 cpuset cgroup starts with no CPUs and no memory nodes: copy the parent's.
                for setting in ("cpuset.cpus", "cpuset.mems"):
                    if (directory / setting).exists() and not (directory / setting).read_text().strip():
                        (directory / setting).write_text((directory.parent / setting).read_text())

    def add_daemon(self, pid: int) -> None:
        """Move `pid` (just started, before it forks anything) into `daemons/` everywhere."""
        for hierarchy in hierarchies():
            procs = hierarchy / self.daemons / "cgroup.procs"
            if procs.exists():
                procs.write_text(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for hierarchy in hierarchies():
            for directory, _, _ in os.walk(hierarchy / self.name):
                try:
                    found.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
                except FileNotFoundError:
                    pass
        return found

    def remove(self, timeout: float = 20) -> None:
        """SIGKILL every process left in the cgroups, then remove them, deepest first."""
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise PlaneError(f"processes {sorted(pids)} survive SIGKILL in cgroup {self.name}")
            time.sleep(0.05)
        for hierarchy in hierarchies():
            top = hierarchy / self.name
            for directory, _, _ in os.walk(top, topdown=False):
                try:
                    os.rmdir(directory)
                except FileNotFoundError:
                    pass

    def exists(self) -> bool:
        return any((hierarchy / self.name).exists() for hierarchy in hierarchies())
