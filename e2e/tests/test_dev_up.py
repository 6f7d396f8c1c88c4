"""`make dev` (`python -m kubeplane.demo up`) as a user runs it: a subprocess on a fresh directory
with its own control plane (not the session's `plane` fixture), the real operator and the example
tenants.

Each run starts a plane with a node and three REAL vClusters (the upstream chart, reached by
NodePort at the node's address). Simulated, as the command itself says: only the GPU nodes of the
example pools (kwok keeps them Ready).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kubeplane.tools import kube_version

EXAMPLE_TENANTS = {"recsys": "Internal", "ml-platform": "Trusted", "acme-ai": "Untrusted"}
START_TIMEOUT_SECONDS = 600
"""A plane with a node, the vCluster images imported, three real vClusters on 2 busy cores."""
DEV_UP = [sys.executable, "-m", "kubeplane.demo", "up"]


def processes_using(directory: Path) -> dict[int, str]:
    """pid -> command line of every process whose command line or environment names `directory`:
    etcd, the apiservers (certificates there), kwok, the operator and its helm calls (KUBECONFIG
    there)."""
    marker = str(directory).encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker in cmdline or marker in environ:
            found[int(proc.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


class DevUp:
    """The command as a subprocess, its output collected line by line, and every process seen
    using its directory while it ran (sampled), so the test can check none outlives it."""

    def __init__(self, directory: Path, *args: str):
        self.directory = directory
        self.lines: list[str] = []
        self.seen: dict[int, str] = {}
        self.process = subprocess.Popen([*DEV_UP, "--dir", str(directory), "--timeout", str(START_TIMEOUT_SECONDS), *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def _sample(self) -> None:
        while self.process.poll() is None:
            self.seen.update(processes_using(self.directory))
            time.sleep(0.5)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for line in self.lines):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"`dev up` never printed /{pattern}/ (exit {self.process.poll()}):\n{self.output}")
            time.sleep(0.2)

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        self._sampler.join(10)
        return code

    def assert_nothing_left(self) -> None:
        """The sampler saw the demo's processes, and none of them (nor anything else using the
        directory) is alive now."""
        seen = " ".join(self.seen.values())
        for name in ("etcd", "kube-apiserver", "kwok", "gputenant run --config"):
            assert name in seen, f"the sampler never saw {name}: {self.seen}"
        alive = processes_using(self.directory)
        assert not alive, f"left running after `dev up` ended: {alive}"


def last_table(output: str) -> dict[str, list[str]]:
    """name -> cells of the last status table printed."""
    rows: dict[str, list[str]] = {}
    for block in output.split("NAME ")[1:]:
        rows = {}
        for line in block.splitlines()[1:]:
            cells = line.split()
            if not cells or cells[0] not in EXAMPLE_TENANTS:
                break
            rows[cells[0]] = cells
    return rows


def usage_commands(output: str) -> list[str]:
    """The indented shell lines printed after 'From another shell:'."""
    after = output.split("From another shell:\n\n", 1)[1]
    commands = []
    for line in after.splitlines():
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    return commands


@pytest.fixture
def dev_dir():
    """A short directory of its own: the node's kubelet sockets live under it (pytest's tmp_path is
    too long for a Unix socket path)."""
    directory = Path(tempfile.mkdtemp(prefix="gtdev-", dir="/tmp"))
    yield directory / "dev"
    shutil.rmtree(directory, ignore_errors=True)


def test_a_directory_too_long_for_the_nodes_sockets_is_refused_naming_the_flag(tmp_path):
    answer = subprocess.run([*DEV_UP, "--dir", str(tmp_path / ("x" * 60)), "--exit-when-ready"],
                            capture_output=True, text=True, timeout=120)
    assert answer.returncode == 2 and "--dir" in answer.stderr and "shorter directory" in answer.stderr


def test_exit_when_ready_shows_the_three_tenants_ready_and_leaves_no_process(dev_dir):
    dev = DevUp(dev_dir, "--exit-when-ready")
    code = dev.wait(START_TIMEOUT_SECONDS + 120)
    assert code == 0, dev.output
    assert "the REAL vCluster 0.36.1" in dev.output and "GPU nodes are SIMULATED" in dev.output
    assert "created 7 GPU nodes for 5 pools, SIMULATED by kwok" in dev.output, dev.output
    assert f"(Kubernetes {kube_version()})" in dev.output, "the demo's plane runs another Kubernetes than asked for"
    table = last_table(dev.output)
    assert set(table) == set(EXAMPLE_TENANTS), dev.output
    for name, trust in EXAMPLE_TENANTS.items():
        assert table[name][1] == trust
        assert table[name][-2:] == ["True", "TenantReady"], table[name]
    assert {table[name][2] for name in table} == {"HAMi", "TimeSlicing", "MIG"}
    assert "kubectl --kubeconfig team.kubeconfig get namespaces" in dev.output
    dev.assert_nothing_left()


def test_printed_commands_work_while_it_runs_and_sigterm_stops_everything(tmp_path, dev_dir):
    dev = DevUp(dev_dir)
    try:
        dev.wait_for_line(r"^Running until Ctrl-C", START_TIMEOUT_SECONDS + 60)
        commands = usage_commands(dev.output)
        assert commands[-2:] == ["gputenant kubeconfig recsys --role view > team.kubeconfig",
                                 "kubectl --kubeconfig team.kubeconfig get namespaces"]
        workdir = tmp_path / "user"
        workdir.mkdir()
        environment = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(commands)], cwd=workdir,
                                env=environment, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{commands}\n{result.stderr}"
        namespaces = {line.split()[0] for line in result.stdout.splitlines()[1:]}
        assert {"default", "kube-system"} <= namespaces
        assert "tenant-recsys" not in namespaces, "listed the host's namespaces, not the virtual cluster's"
        assert (workdir / "team.kubeconfig").read_text().startswith("apiVersion")
        denied = subprocess.run(
            ["bash", "-c", "\n".join(commands[:-1]) + "\nkubectl --kubeconfig team.kubeconfig create namespace nope"],
            cwd=workdir, env=environment, capture_output=True, text=True, timeout=60)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    finally:
        dev.process.send_signal(signal.SIGTERM)
        code = dev.wait(120)
    assert code == 0, dev.output
    assert "stopped everything" in dev.output
    dev.assert_nothing_left()


def test_a_tenant_that_cannot_be_granted_is_shown_and_ends_the_run_with_an_error(tmp_path, dev_dir):
    tenant = tmp_path / "too-big.yaml"
    tenant.write_text("apiVersion: gputenant.io/v1alpha1\nkind: GpuTenant\nmetadata: {name: too-big}\n"
                      "spec:\n  trust: Untrusted\n  owners: [{kind: User, name: someone@example.com}]\n"
                      "  gpu: {quota: 40}\n")
    dev = DevUp(dev_dir, "--exit-when-ready", "--tenants", str(tenant))
    code = dev.wait(START_TIMEOUT_SECONDS)
    assert code == 1, dev.output
    assert re.search(r"tenant too-big: Ready=False, reason QuotaAbovePoolCapacity: .*lower gpu.limit", dev.output), \
        dev.output
    dev.assert_nothing_left()
