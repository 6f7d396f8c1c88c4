"""The operator's admission guard runs in a child process; when the operator is killed (SIGKILL:
no cleanup handler runs), the guard ends too and nothing is left listening on its port. Issue 24:
a guard orphaned by a killed operator was still listening an hour after the test suite ended."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
import yaml

from gputenant.config.models import OperatorConfig
from kubeplane import wait_for
from kubeplane.operator_process import GUARD_CONFIGURATION, OperatorProcess, guard_flags, remove_guard_configurations

pytestmark = pytest.mark.plane


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie no longer listens; its reaping is init's business)."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except FileNotFoundError:
        return False


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def guarded_operator(plane, crds, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(OperatorConfig().model_dump(by_alias=True, mode="json")))
    flags = guard_flags(tmp_path / "guard-certs")
    operator = OperatorProcess(plane, config, tmp_path / "operator.log", extra_args=flags).start()
    try:
        yield operator, int(flags[flags.index("--webhook-port") + 1])
    finally:
        operator.kill()
        remove_guard_configurations(plane)


def test_a_killed_operator_leaves_no_guard_listening(plane, guarded_operator):
    operator, port = guarded_operator
    try:
        wait_for(lambda: listening(port) and plane.kubectl(
            "get", "validatingwebhookconfiguration", GUARD_CONFIGURATION, check=False).returncode == 0,
            timeout=120, interval=0.5, what="the operator's guard to serve and register")
    except TimeoutError:
        raise AssertionError(f"the guard did not start; operator log:\n{operator.log_tail()}") from None
    spawned = children(operator.process.pid)
    guard = [pid for pid in spawned if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert guard, f"no guard child among {spawned}"

    os.kill(operator.process.pid, signal.SIGKILL)
    operator.process.wait(timeout=10)
    try:
        wait_for(lambda: not any(running(pid) for pid in spawned) and not listening(port), timeout=60, interval=0.2,
                 what="the guard to end with its operator")
    except TimeoutError:
        left = [pid for pid in spawned if running(pid)]
        raise AssertionError(f"left running: {left}, port {port} listening: {listening(port)}\n"
                             f"operator log:\n{operator.log_tail()}") from None
    assert "the admission guard stops" in operator.log_path.read_text()
