"""The operator riding out a kube-apiserver outage (issue 17, defect 4): the API server of the test
plane is stopped for 30 s while the operator runs; afterwards the log holds no traceback and a
change made after the outage is reconciled by the same operator process.

The plane has no method to restart its API server, so `apiserver_stopped` does it here: it stops
the running kube-apiserver and starts the same command line again (same ports, certificates, etcd
and audit log), handing the new process to the plane so the plane stops it at the end.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from kubeplane import wait_for
from kubeplane.process import Process

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

OUTAGE_SECONDS = 30
APISERVER = "kube-apiserver"


def _apiserver_process(plane) -> Process:
    found = [process for process in plane._processes if process.name == APISERVER]
    assert found, f"the plane runs no {APISERVER} of its own (attached planes cannot be restarted here)"
    return found[0]


def _serving(plane) -> bool:
    result = plane.kubectl("get", "--raw", "/readyz", check=False)
    return result.returncode == 0 and result.stdout.strip() == "ok"


@contextlib.contextmanager
def apiserver_stopped(plane):
    """kube-apiserver stopped inside the block, serving again after it."""
    running = _apiserver_process(plane)
    command = Path(f"/proc/{running.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    running.stop()
    try:
        yield
    finally:
        restarted = Process(APISERVER, [part.decode() for part in command], running.log_path)
        plane._processes[plane._processes.index(running)] = restarted
        wait_for(lambda: _serving(plane), timeout=60, interval=0.5, what="kube-apiserver serving again")


def test_a_30s_apiserver_outage_leaves_no_traceback_and_changes_after_it_are_reconciled(plane, tenants_api):
    operator = tenants_api.operator
    tenants_api.apply(tenants_api.manifest("outage-t", "Trusted", owner="o-owner", gpus=1))
    before = tenants_api.wait_ready("outage-t")["status"]["granted"]["queue"]["quota"]
    pid = operator.process.pid
    log_start = operator.log_path.stat().st_size

    with apiserver_stopped(plane):
        time.sleep(OUTAGE_SECONDS)

    tenants_api.apply(tenants_api.manifest("outage-t", "Trusted", owner="o-owner", gpus=2))
    body = tenants_api.wait_ready("outage-t", timeout=180)
    assert body["status"]["granted"]["queue"]["quota"] == 2 * before
    queue = plane.cluster_object("scheduling.run.ai", "v2", "queues", "outage-t")
    assert queue["spec"]["resources"]["gpu"]["quota"] == 2 * before
    assert operator.process.poll() is None and operator.process.pid == pid, "the operator was restarted"
    with operator.log_path.open("rb") as log:
        log.seek(log_start)
        since = log.read().decode(errors="replace")
    assert "Traceback" not in since, since[-6000:]
    assert "writing its status failed" in since, "no pass met the outage: the test proved nothing"
