"""The operator riding out a kube-apiserver outage (issue 17, defect 4): the API server of the test
plane is stopped for 30 s while the operator runs; afterwards the log holds no traceback and a
change made after the outage is reconciled by the same operator process.

The plane has no method to restart its API server; `kubeplane.outage.apiserver_stopped` stops it
and starts the same command line again.
"""

from __future__ import annotations

import time

import pytest

from kubeplane.outage import apiserver_stopped

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

OUTAGE_SECONDS = 30


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
