"""Spec changes, crash recovery and offboarding against the real control plane, each tenant's
vCluster the REAL chart running on the plane's node. What the pipeline decides on a change (a GPU
quota change without Helm, an impossible policy withholding parts, Retain) is asserted in-process:
test_reconciler_inprocess*.py."""

from __future__ import annotations

import kubernetes
import pytest

from gputenant.kube.client import USER_AGENT
from kubeplane import WRITE_VERBS, wait_for
from kubeplane.inprocess import labelled_objects

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

LABEL = "gputenant.io/tenant"


@pytest.fixture(autouse=True)
def offboard_after_each(tenants_api):
    """Each test's tenant goes when the test ends: one real vCluster at a time on the node."""
    yield
    tenants_api.delete_all()


def helm_revisions(plane, name: str) -> int:
    with plane.api_client() as client:
        return len(kubernetes.client.CoreV1Api(client).list_namespaced_secret(
            f"tenant-{name}", label_selector=f"owner=helm,name={name}").items)


def queue(plane, name: str) -> dict | None:
    return plane.cluster_object("scheduling.run.ai", "v2", "queues", name)


def namespace_exists(plane, name: str) -> bool:
    return bool(plane.kubectl("get", "namespace", name, "-o", "name", "--ignore-not-found").stdout.strip())


def helm_releases(plane) -> list[str]:
    return plane.helm("list", "--all-namespaces", "--all", "-q").stdout.split()


def control_plane(plane, name: str) -> tuple[dict, list[dict]]:
    """The vCluster StatefulSet of tenant `name` and its pods."""
    with plane.api_client() as client:
        statefulset = kubernetes.client.AppsV1Api(client).read_namespaced_stateful_set(name, f"tenant-{name}")
        pods = kubernetes.client.CoreV1Api(client).list_namespaced_pod(
            f"tenant-{name}", label_selector=f"app=vcluster,release={name}").items
        return client.sanitize_for_serialization(statefulset), client.sanitize_for_serialization(pods)


def tenant_writes(plane, operator, offset: int, name: str) -> list[str]:
    """The operator's writes to the GpuTenant object itself since `offset` (its status subresource apart)."""
    uri = f"/apis/gputenant.io/v1beta1/gputenants/{name}"
    return [event["verb"] for event in plane.audit_events(offset)
            if event.get("user", {}).get("username") == operator.user and event["verb"] in WRITE_VERBS
            and event["requestURI"].split("?")[0] == uri]


def test_vcluster_value_change_is_exactly_one_upgrade_and_ready_only_once_rolled_out(plane, tenants_api):
    """The values change the control plane's pod template (the chart hashes its values into it), so
    the StatefulSet rolls to a new revision; Ready at the new generation means that rollout is over.
    kopf's diff base lives in the operator's process: it still tells the spec change (its spec
    handler runs), and the operator wrote the tenant itself once, for its finalizer. The passes
    read pods and the Queue from the operator's indexes."""
    offset = plane.audit_offset()
    tenants_api.apply(tenants_api.manifest("upgrade-t", "Trusted", owner="u-owner"))
    tenants_api.wait_ready("upgrade-t")
    assert helm_revisions(plane, "upgrade-t") == 1
    before = control_plane(plane, "upgrade-t")[0]["status"]["updateRevision"]
    tenants_api.apply(tenants_api.manifest("upgrade-t", "Trusted", owner="u-owner",
                                           vcluster={"values": {"coreDNSReplicas": 2}}))
    tenants_api.wait_ready("upgrade-t")
    statefulset, pods = control_plane(plane, "upgrade-t")
    status = statefulset["status"]
    assert status["updateRevision"] != before
    assert status["observedGeneration"] == statefulset["metadata"]["generation"]
    assert status["currentRevision"] == status["updateRevision"] and status.get("readyReplicas") == 1
    assert [pod["metadata"]["labels"]["controller-revision-hash"] for pod in pods
            if not pod["metadata"].get("deletionTimestamp")] == [status["updateRevision"]]
    wait_for(lambda: helm_revisions(plane, "upgrade-t") == 2, timeout=10, what="one upgrade")
    assert helm_revisions(plane, "upgrade-t") == 2
    operator = tenants_api.operator
    assert "Handler 'reconcile/spec' succeeded" in operator.log_tail(400)
    assert tenant_writes(plane, operator, offset, "upgrade-t") == ["patch"]
    # every pass read the host namespace's pods and the tenant's Queue from the operator's indexes:
    # no pod listing, no Queue GET (the admission guard, a process of its own under its own user
    # agent, lists pods to judge GPU pods)
    read = [(event["verb"], event["requestURI"].split("?")[0]) for event in plane.audit_events(offset)
            if event.get("user", {}).get("username") == operator.user and event.get("userAgent") == USER_AGENT
            and event["verb"] in ("get", "list")]
    assert ("list", "/api/v1/namespaces/tenant-upgrade-t/pods") not in read
    assert ("get", "/apis/scheduling.run.ai/v2/queues/upgrade-t") not in read
    assert tenants_api.get("upgrade-t")["metadata"]["finalizers"] == ["gputenant.io/finalizer"]


def test_sigkill_mid_pipeline_and_restart_converges_without_duplicates(plane, tenants_api):
    operator = tenants_api.operator
    tenants_api.apply(tenants_api.manifest("crash-t", "Internal", owner="c-owner"))
    wait_for(lambda: helm_revisions(plane, "crash-t") or None, timeout=60, interval=0.05,
             what="the pipeline to reach the Helm step")
    operator.kill()
    operator.start()
    tenants_api.wait_ready("crash-t")
    assert helm_revisions(plane, "crash-t") == 1
    secrets = plane.kubectl("get", "secrets", "-n", "tenant-crash-t", "-l", f"{LABEL}=crash-t",
                            "-o", "name").stdout.split()
    assert sorted(secrets) == ["secret/crash-t-kubeconfig-admin", "secret/crash-t-kubeconfig-view"]


def test_prevent_deletion_blocks_then_delete_cleans_up(plane, tenants_api):
    """The vCluster StatefulSet's data claim carries kubernetes.io/pvc-protection; the namespace is
    gone only because the plane runs the PVC protection controller, as every real cluster does."""
    tenants_api.apply(tenants_api.manifest("gone-t", "Untrusted", owner="g-owner", preventDeletion=True))
    tenants_api.wait_ready("gone-t")
    assert labelled_objects(plane, "gone-t") and "gone-t" in helm_releases(plane)
    plane.kubectl("delete", "gputenant", "gone-t", "--wait=false")
    blocked = wait_for(lambda: tenants_api.condition(tenants_api.get("gone-t"), "DeletionPrevented") or None,
                       timeout=30, what="DeletionPrevented")
    assert blocked["status"] == "True"
    assert namespace_exists(plane, "tenant-gone-t") and queue(plane, "gone-t") is not None
    plane.kubectl("patch", "gputenant", "gone-t", "--type=merge", "-p", '{"spec":{"preventDeletion":false}}')
    wait_for(lambda: tenants_api.get("gone-t") is None, timeout=300, what="the tenant to be deleted")
    assert labelled_objects(plane, "gone-t") == []
    assert queue(plane, "gone-t") is None
    assert "gone-t" not in helm_releases(plane)
    assert not namespace_exists(plane, "tenant-gone-t")
