"""The reconciler in-process (kubeplane.inprocess): create, update, resync and offboarding of
GpuTenants against the session's real API server, each condition and reason the pipeline sets
asserted through the API (status, observedGeneration) with what was and was not written. The Helm
release and the vCluster's token API are the recording TEST DOUBLES of kubeplane.inprocess; the
real-vCluster modules keep the journeys on the real chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError
from gputenant.reconcile.memory import RETRY_ANNOTATION
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import ARGOCD_NAMESPACE, install_crds, install_kai_queue_crd
from kubeplane.inprocess import OPERATOR_USER, InProcessOperator
from kubeplane.tools import pinned_versions

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
QUEUE = ("scheduling.run.ai/v2", "Queue")


@pytest.fixture(scope="module")
def op(plane: ControlPlane):
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(plane)
    running = InProcessOperator(plane, CONFIG)
    wait_for(lambda: served(running, *QUEUE), timeout=30, interval=0.2, what="the Queue CRD served")
    yield running
    for tenant in running.run(running.platform.list("gputenant.io/v1alpha1", "GpuTenant")):
        name = tenant["metadata"]["name"]
        if name.startswith("ip-"):
            running.releases.failure = None
            running.delete(name, finish=not tenant["metadata"].get("deletionTimestamp"))
            if running.tenant(name) is not None:
                running.offboard(name)
    running.close()


def served(op: InProcessOperator, api_version: str, kind: str) -> bool:
    """A fresh CRD answers 429 while its storage initialises."""
    try:
        op.run(op.platform.list(api_version, kind))
    except ApiError:
        return False
    return True


@pytest.fixture(autouse=True)
def reset_doubles(op: InProcessOperator):
    op.releases.failure = op.issuer.failure = op.issuer.silence = None


def manifest(name: str, trust: str = "Trusted", gpus: float = 1, **spec) -> dict:
    vcluster = {"kubernetesVersion": pinned_versions()["kube"], **spec.pop("vcluster", {})}
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": trust, "owners": [{"kind": "User", "name": f"{name}-owner"}],
                     "gpu": {"quota": gpus}, "vcluster": vcluster, **spec}}


def namespace(name: str) -> str:
    return CONFIG.namespace_prefix + name


def assert_condition(op: InProcessOperator, name: str, condition_type: str, status: str, reason: str) -> dict:
    """The condition as the API server holds it, at the tenant's current generation."""
    body = op.tenant(name)
    assert body is not None
    found = op.condition(name, condition_type)
    assert (found.get("status"), found.get("reason")) == (status, reason), found
    assert found["observedGeneration"] == body["metadata"]["generation"], found
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
    return found


def test_create_walks_the_control_plane_up_to_ready(op):
    name = "ip-create"
    op.apply(manifest(name))
    first = op.reconcile(name)
    assert first.wait_after is not None and not first.ready and first.retry_after is None
    assert [call[4] for call in op.releases.ensure_calls(name)] == [True]  # known absent: the first install
    # read right after Helm wrote it: the StatefulSet controller has not observed it yet
    assert_condition(op, name, reasons.VCLUSTER_READY, "False", reasons.CONTROL_PLANE_ROLLING_OUT)
    op.wait_for_pods(name)
    op.reconcile(name)
    assert_condition(op, name, reasons.VCLUSTER_READY, "False", reasons.CONTROL_PLANE_STARTING)
    ready = assert_condition(op, name, reasons.READY, "False", reasons.CONTROL_PLANE_STARTING)
    assert ready["message"].startswith("VClusterReady: ")
    for part in (reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY, reasons.NETWORK_READY,
                 reasons.QUEUE_READY):
        assert_condition(op, name, part, "True", reasons.APPLIED)
    assert_condition(op, name, reasons.SHARING_READY, "True", reasons.CHOSEN_FROM_TRUST)
    assert op.get(*QUEUE, name) is not None
    assert op.condition(name, reasons.KUBECONFIG_READY) == {}  # the steps after the wait did not run
    op.serve(name, secret=False)
    op.reconcile(name)
    assert_condition(op, name, reasons.VCLUSTER_READY, "False", reasons.WAITING_FOR_CONTROL_PLANE)
    op.serve(name)
    outcome = op.reconcile(name)
    assert outcome.ready and outcome.wait_after is None
    assert_condition(op, name, reasons.VCLUSTER_READY, "True", reasons.CONTROL_PLANE_UP)
    assert_condition(op, name, reasons.KUBECONFIG_READY, "True", reasons.ISSUED)
    assert_condition(op, name, reasons.ARGOCD_READY, "True", reasons.NOT_REQUESTED)
    assert_condition(op, name, reasons.READY, "True", reasons.TENANT_READY)
    assert len(op.releases.ensure_calls(name)) == 1
    assert [call[2] for call in op.issuer.calls if call[0] == "issue" and call[1] == name] == [("admin", "view")]
    for role in ("admin", "view"):
        assert op.get("v1", "Secret", f"{name}-kubeconfig-{role}", namespace(name)) is not None


def test_an_unchanged_resync_writes_nothing_and_calls_no_edge(op, plane):
    name = "ip-resync"
    op.apply(manifest(name))
    op.ready(name)
    op.reconcile(name)  # settles anything the first Ready pass left (the tenant view)
    writes, helm, issued, since = op.writes(), len(op.releases.calls), len(op.issuer.calls), plane.audit_offset()
    outcome = op.reconcile(name)
    assert outcome.ready and not outcome.status_written and outcome.applied == []
    assert op.writes() == writes
    assert len(op.releases.calls) == helm
    assert [call for call in op.issuer.calls[issued:] if call[0] == "issue"] == []
    written = [event for event in plane.audit_events(since)
               if event.get("user", {}).get("username") == OPERATOR_USER and event["verb"] not in ("get", "list")]
    assert written == []


def test_a_gpu_quota_change_updates_quota_and_queue_without_helm(op):
    name = "ip-quota"
    op.apply(manifest(name, gpus=1))
    body = op.ready(name)
    before = op.get(*QUEUE, name)["spec"]["resources"]["gpu"]["quota"]
    helm = len(op.releases.ensure_calls(name))
    op.apply(manifest(name, gpus=2))
    outcome = op.reconcile(name)
    assert outcome.ready
    after = op.tenant(name)
    assert after["metadata"]["generation"] == body["metadata"]["generation"] + 1
    assert_condition(op, name, reasons.READY, "True", reasons.TENANT_READY)
    queue = op.get(*QUEUE, name)["spec"]["resources"]["gpu"]["quota"]
    assert queue == 2 * before == after["status"]["granted"]["queue"]["quota"]
    [quota] = op.run(op.platform.list("v1", "ResourceQuota", namespace=namespace(name)))
    assert all(key in quota["spec"]["hard"] for key in after["status"]["granted"]["resources"])
    assert len(op.releases.ensure_calls(name)) == helm


def test_a_values_change_is_one_upgrade_and_ready_only_once_rolled_out(op):
    name = "ip-upgrade"
    op.apply(manifest(name))
    op.ready(name)
    op.apply(manifest(name, vcluster={"values": {"coreDNSReplicas": 2}}))
    op.reconcile(name)
    assert len(op.releases.ensure_calls(name)) == 2
    waiting = op.condition(name, reasons.VCLUSTER_READY)
    assert waiting["status"] == "False"
    assert waiting["reason"] in (reasons.CONTROL_PLANE_ROLLING_OUT, reasons.CONTROL_PLANE_STARTING), waiting
    assert op.condition(name, reasons.READY)["status"] != "True"
    op.ready(name)
    assert_condition(op, name, reasons.READY, "True", reasons.TENANT_READY)
    assert len(op.releases.ensure_calls(name)) == 2
