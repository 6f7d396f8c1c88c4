"""Child processes of a plane: own process group, log file, and no survival past their parent."""

from __future__ import annotations

import ctypes
import http.client
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

START_TIMEOUT_SECONDS = 120
T = TypeVar("T")


class PlaneError(RuntimeError):
    """The control plane could not start or answer; the message names the log to read."""


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# Looked up before any fork: the child should not have to load anything.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_PR_SET_PDEATHSIG = 1


def _new_group_dying_with_parent() -> None:
    """Runs in the child before exec: a process group of its own, so stop() can signal everything
    it spawned, and SIGTERM when the parent dies, so a killed test run leaves no etcd behind."""
    os.setsid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _before_exec():
    """The kernel sends the death signal when the forking *thread* ends, so a process started
    from a worker thread (e.g. a virtual apiserver started by a watcher) only gets its own group;
    stop() or the owner's cleanup ends it."""
    if threading.current_thread() is threading.main_thread():
        return _new_group_dying_with_parent
    return os.setsid


class Process:
    """One binary of the plane, logging to `log_path`."""

    def __init__(self, name: str, args: list[str], log_path: Path):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self._popen = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_before_exec(),
            )

    @property
    def pid(self) -> int:
        return self._popen.pid

    def check_running(self) -> None:
        if self._popen.poll() is not None:
            raise PlaneError(
                f"{self.name} exited with status {self._popen.returncode}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_seconds: float = 10) -> None:
        """SIGTERM the whole group, then SIGKILL whatever is left of it, and reap the child."""
        self._signal_group(signal.SIGTERM)
        try:
            self._popen.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            pass
        self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._popen.pid, sig)
        except ProcessLookupError:
            pass


def wait_for(probe: Callable[[], T | None], *, timeout: float = 30, interval: float = 0.1,
             what: str = "condition") -> T:
    """Poll `probe` until it returns something truthy and return that; controllers are asynchronous,
    so tests wait for the observable outcome instead of sleeping."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def healthz_ok(host: str, port: int, path: str = "/healthz", timeout: float = 2) -> bool:
    """Whether plain-HTTP `path` on host:port answers 200 (kube-proxy's and kube-router's /healthz,
    MetalLB's /metrics, etcd's /health)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def wait_until_serving(process: Process, probe: Callable[[], bool], what: str,
                       timeout: float = START_TIMEOUT_SECONDS) -> None:
    """Wait for `probe`; if the process dies or the time runs out, stop it and say why."""
    def ready() -> bool:
        process.check_running()
        return probe()
    try:
        wait_for(ready, timeout=timeout, interval=0.05, what=what)
    except TimeoutError as error:
        process.stop()
        raise PlaneError(f"{error}; last lines of {process.log_path}:\n{process.log_tail()}") from None
    except PlaneError:
        process.stop()
        raise
