"""Starting a cluster component (kwok, a KAI-Scheduler binary) as a child process of a plane: its
own client identity, its log next to the plane's, loopback-only ports and a readiness probe."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .apiserver import http_ok
from .plane import ControlPlane
from .process import Process, wait_until_serving


def start_component(plane: ControlPlane, name: str, binary: Path, args: list[str], *,
                    ready_port: int, ready_path: str, env: Mapping[str, str] | None = None) -> Process:
    """Run `binary args` as the plane user `name` (a client certificate in system:masters, so the
    audit log tells it apart) and wait until GET http://127.0.0.1:ready_port/ready_path answers 200.
    KUBECONFIG is always set: some components read it before their flags, and without it they
    would fall back to the user's ~/.kube/config."""
    kubeconfig = plane.user(name, groups=["system:masters"])
    environment = [f"KUBECONFIG={kubeconfig}", *(f"{key}={value}" for key, value in (env or {}).items())]
    process = Process(name, ["env", *environment, str(binary), *args], plane.log_dir / f"{name}.log")
    wait_until_serving(process, lambda: http_ok(ready_port, ready_path),
                       f"{name} {ready_path} on port {ready_port}")
    return process
