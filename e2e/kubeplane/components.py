"""Starting a cluster component (kwok, a KAI-Scheduler binary) as a child process of a plane: its
own client identity, its log next to the plane's, loopback-only ports and a readiness probe."""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Mapping

from .plane import ControlPlane, wait_for
from .process import PlaneError, Process

START_TIMEOUT_SECONDS = 120


def http_ok(port: int, path: str) -> bool:
    """GET http://127.0.0.1:port/path answers 200. Plain http.client: no proxy settings apply."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def start_component(plane: ControlPlane, name: str, binary: Path, args: list[str], *,
                    ready_port: int, ready_path: str, env: Mapping[str, str] | None = None) -> Process:
    """Run `binary args` with the plane's admin-like identity `name` (a client certificate in
    system:masters, so the audit log tells it apart) and wait until GET ready_path on ready_port
    answers 200. KUBECONFIG is always set: some components read it before their flags, and without
    it they would fall back to the user's ~/.kube/config."""
    kubeconfig = plane.user(name, groups=["system:masters"])
    environment = [f"KUBECONFIG={kubeconfig}", *(f"{key}={value}" for key, value in (env or {}).items())]
    process = Process(name, ["env", *environment, str(binary), *args], plane.log_dir / f"{name}.log")

    def ready() -> bool:
        process.check_running()
        return http_ok(ready_port, ready_path)
    try:
        wait_for(ready, timeout=START_TIMEOUT_SECONDS, interval=0.1,
                 what=f"{name} to answer {ready_path} on port {ready_port}")
    except TimeoutError as error:
        process.stop()
        raise PlaneError(f"{error}; last lines of {process.log_path}:\n{process.log_tail()}") from None
    except PlaneError:
        process.stop()
        raise
    return process
