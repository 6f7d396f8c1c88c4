"""A plane's kube-apiserver stopped for a while: the plane has no method to restart its API server,
so `apiserver_stopped` stops the running kube-apiserver and starts the same command line again (same
ports, certificates, etcd and audit log), handing the new process to the plane so the plane stops
it at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kubeplane.plane import ControlPlane
from kubeplane.process import Process, wait_for

APISERVER = "kube-apiserver"


def _apiserver_process(plane: ControlPlane) -> Process:
    found = [process for process in plane._processes if process.name == APISERVER]
    assert found, f"the plane runs no {APISERVER} of its own (attached planes cannot be restarted here)"
    return found[0]


def serving(plane: ControlPlane) -> bool:
    result = plane.kubectl("get", "--raw", "/readyz", check=False)
    return result.returncode == 0 and result.stdout.strip() == "ok"


@contextlib.contextmanager
def apiserver_stopped(plane: ControlPlane) -> Iterator[None]:
    """kube-apiserver stopped inside the block, serving again after it."""
    running = _apiserver_process(plane)
    command = Path(f"/proc/{running.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    running.stop()
    try:
        yield
    finally:
        restarted = Process(APISERVER, [part.decode() for part in command], running.log_path)
        plane._processes[plane._processes.index(running)] = restarted
        wait_for(lambda: serving(plane), timeout=60, interval=0.5, what="kube-apiserver serving again")
