"""Child processes of a plane: own process group, log file, and no survival past their parent."""

from __future__ import annotations

import ctypes
import http.client
import os
import random
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


LISTEN_PORT_FLOOR = 10300
"""Above the ports node components take by default (kubelet 10248/10250, kube-proxy 10249/10256,
kube-controller-manager 10257, kube-scheduler 10259)."""
FIXED_PORTS = frozenset({20244})
"""Other fixed ports of the harness's components (kube-router's health port)."""
NODE_PORT_LOW = 30000
"""Kubernetes' default NodePort range starts here: kept clear as well."""
SLICES = 8
_handed_out: set[int] = set()


def listen_port_range() -> range:
    """Where planes' components listen: below the kernel's ephemeral range. A port `bind(0)` picks
    comes from that range, which is also where the kernel takes every outgoing connection's source
    port, so a port picked free was seen taken by a connection before the component meant to listen
    on it started ("bind: address already in use"); below the NodePort range too. Each pytest-xdist
    worker gets a slice of its own, so two workers never pick the same port."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    span = max(min(ephemeral_low, NODE_PORT_LOW) - LISTEN_PORT_FLOOR, 0) // SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker.removeprefix("gw")) % SLICES if worker.removeprefix("gw").isdigit() else SLICES - 1
    return range(LISTEN_PORT_FLOOR + index * span, LISTEN_PORT_FLOOR + (index + 1) * span)


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on or connects from right now,
    none handed out before by this process (`listen_port_range`); from `bind(0)` where the kernel
    leaves no room below its ephemeral range."""
    candidates = listen_port_range()
    if len(candidates) < 10 * count:
        return _kernel_ports(count)
    for _ in range(2):
        found: list[int] = []
        for port in random.sample(candidates, len(candidates)):
            if port not in _handed_out and port not in FIXED_PORTS and _bindable(port):
                found.append(port)
                if len(found) == count:
                    _handed_out.update(found)
                    return found
        _handed_out.clear()  # every port of the slice was handed out once: those long stopped are free again
    raise PlaneError(f"no {count} free ports in {candidates.start}-{candidates.stop - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_ports(count: int) -> list[int]:
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


def preexec_for_thread():
    """The kernel sends the death signal when the forking *thread* ends, so a process started
    from a worker thread (e.g. a virtual apiserver started by a watcher) only gets its own group;
    stop() or the owner's cleanup ends it."""
    if threading.current_thread() is threading.main_thread():
        return _new_group_dying_with_parent
    return os.setsid


FATAL_MARKERS = ('"level":"panic"', '"level":"fatal"', "panic: ", "fatal error: ")


def _names_a_fatal_error(line: str) -> bool:
    """A zap JSON line at level panic/fatal, or the runtime's own `panic:` / `fatal error:`."""
    return any(marker in line for marker in FATAL_MARKERS)


class Process:
    """One binary of the plane, logging to `log_path`."""

    def __init__(self, name: str, args: list[str], log_path: Path):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self._popen = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=preexec_for_thread(),
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
        """The log's last lines, after the line that says why a Go program panicked or died when
        that line is above them (a panic's stack alone does not name the error, e.g. etcd's
        "failed to create WAL" with its "no space left on device")."""
        logged = self.log_path.read_text(errors="replace").splitlines()
        tail = logged[-lines:]
        cause = next((line for line in logged[:-lines] if _names_a_fatal_error(line)), None)
        return "\n".join(([cause, "[…]"] if cause else []) + tail)

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
