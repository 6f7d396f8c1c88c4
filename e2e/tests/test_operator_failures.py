"""Failure paths of the operator against the real control plane (issue 17): every failure inside a
pass ends as a condition with its own reason while the other tenants stay Ready, a tenant
re-created under the name of a failed one inherits nothing, and nothing the operator did not make
is taken over."""

from __future__ import annotations

import time

import kubernetes
import pytest

from kubeplane import wait_for

STEADY = "steady-t"


@pytest.fixture(scope="module")
def plane(vcluster_node):
    """The plane the operator drives real vClusters on (it has a node)."""
    return vcluster_node


def settled(tenants_api, name: str, condition_type: str = "Ready", timeout: float = 60) -> dict:
    """The tenant once `condition_type` is False at its current generation."""
    def false_now():
        body = tenants_api.get(name)
        found = tenants_api.condition(body, condition_type)
        current = body and found.get("observedGeneration") == body["metadata"]["generation"]
        return body if current and found.get("status") == "False" else None
    try:
        return wait_for(false_now, timeout=timeout, interval=0.5, what=f"{name} {condition_type}=False")
    except TimeoutError:
        raise AssertionError(f"{name}: {(tenants_api.get(name) or {}).get('status')}\n"
                             f"{tenants_api.operator.log_tail()}") from None


def namespace_exists(plane, name: str) -> bool:
    return bool(plane.kubectl("get", "namespace", name, "-o", "name", "--ignore-not-found").stdout.strip())


def delete_tenant(plane, tenants_api, name: str) -> None:
    plane.kubectl("delete", "gputenant", name, "--wait=false")
    wait_for(lambda: tenants_api.get(name) is None, timeout=300, interval=0.5, what=f"{name} deleted")


@pytest.fixture(scope="module")
def steady(tenants_api) -> dict:
    """A tenant that must stay Ready, untouched, whatever happens to the others."""
    tenants_api.apply(tenants_api.manifest(STEADY, "Trusted", owner="s-owner"))
    return tenants_api.wait_ready(STEADY)


def assert_still_ready(tenants_api, before: dict) -> None:
    after = tenants_api.get(STEADY)
    ready = tenants_api.condition(after, "Ready")
    assert ready["status"] == "True", after["status"]
    assert ready["lastTransitionTime"] == tenants_api.condition(before, "Ready")["lastTransitionTime"]


def test_requests_above_limits_are_refused_by_the_crd_naming_the_field(plane, tenants_api, steady):
    manifest = tenants_api.manifest("overreq-t", "Trusted", owner="o-owner", vcluster={"resources": {
        "requests": {"cpu": "4", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}})
    with pytest.raises(Exception) as refused:
        tenants_api.apply(manifest)
    message = str(getattr(refused.value, "stderr", "")) + str(refused.value)
    assert "spec.vcluster.resources.requests.cpu" in message and "must not exceed limits.cpu" in message, message
    assert tenants_api.get("overreq-t") is None
    assert_still_ready(tenants_api, steady)


@pytest.mark.parametrize("name, spec, reason, named", [
    ("smallcpu-t", {"quotas": {"cpu": "100m"}}, "QuotaBelowControlPlane",
     ("quotas.cpu 100m", "limited to 2", "vcluster.resources.limits.cpu")),
    ("wrongpool-t", {"sharing": {"mode": "TimeSlicing"}, "gpu": {"quota": 1, "pool": "h100-mig-small"}},
     "PoolModeMismatch", ("gpu.pool h100-mig-small", "a100-timeslice")),
])
def test_each_unsatisfiable_spec_ends_not_ready_with_its_own_reason(plane, tenants_api, steady, name, spec,
                                                                    reason, named):
    tenants_api.apply(tenants_api.manifest(name, "Trusted", owner="f-owner", **spec))
    body = settled(tenants_api, name)
    ready = tenants_api.condition(body, "Ready")
    assert ready["reason"] == reason, body["status"]
    for words in named:
        assert words in ready["message"], ready["message"]
    assert tenants_api.condition(body, "VClusterReady").get("status") != "True"
    assert_still_ready(tenants_api, steady)


def test_a_spec_the_renderer_refuses_is_a_condition_with_nothing_applied(plane, tenants_api, steady):
    """Admitted by the CRD (limits without cpu), refused by rendering: RenderFailed naming the
    field, no namespace, no traceback in the log."""
    tenants_api.apply(tenants_api.manifest("norender-t", "Trusted", owner="r-owner", vcluster={"resources": {
        "limits": {"memory": "2Gi"}}}))
    body = settled(tenants_api, "norender-t")
    ready = tenants_api.condition(body, "Ready")
    assert ready["reason"] == "RenderFailed", body["status"]
    assert "spec.vcluster.resources.limits.cpu" in ready["message"]
    assert not namespace_exists(plane, "tenant-norender-t")
    assert "Traceback" not in tenants_api.operator.log_path.read_text(errors="replace")
    assert_still_ready(tenants_api, steady)


def test_a_tenant_recreated_valid_after_a_permanent_helm_failure_goes_ready(plane, tenants_api, steady):
    """A chart version the operator's (local) chart is not: a permanent Helm failure. Deleted and
    created again valid under the same name, the tenant must not inherit it."""
    tenants_api.apply(tenants_api.manifest("rehelm-t", "Trusted", owner="h-owner",
                                           vcluster={"chartVersion": "0.35.0"}))
    body = settled(tenants_api, "rehelm-t", "VClusterReady")
    failed = tenants_api.condition(body, "VClusterReady")
    # the failure's own name since the Helm boundary names each failure once (was the generic HelmFailed)
    assert failed["reason"] == "ChartVersionMismatch" and "gputenant.io/retry" in failed["message"], failed
    delete_tenant(plane, tenants_api, "rehelm-t")
    tenants_api.apply(tenants_api.manifest("rehelm-t", "Trusted", owner="h-owner"))
    tenants_api.wait_ready("rehelm-t")
    assert_still_ready(tenants_api, steady)


def foreign_queue(name: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"displayName": "a department's own queue",
                     "resources": {"gpu": {"quota": 3, "limit": -1, "overQuotaWeight": 1},
                                   "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                   "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


def test_a_queue_someone_else_made_under_the_tenants_name_is_neither_taken_nor_deleted(plane, tenants_api):
    """The GpuTenant webhook refuses a new tenant named like a foreign Queue (test_attack_tenant_api);
    the reconciler holds the same line on its own: a Queue replaced by someone else's under the
    tenant's name is not overwritten on the next pass, nor deleted on offboarding."""
    name = "dept-q"
    tenants_api.apply(tenants_api.manifest(name, "Trusted", owner="d-owner"))
    tenants_api.wait_ready(name, timeout=240)
    try:
        plane.kubectl("delete", "queues.scheduling.run.ai", name)
        with plane.api_client() as client:
            custom = kubernetes.client.CustomObjectsApi(client)
            custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", foreign_queue(name))
        body = settled(tenants_api, name, "QueueReady", timeout=4 * tenants_api.operator.resync_seconds + 60)
        queue_ready = tenants_api.condition(body, "QueueReady")
        assert queue_ready["reason"] == "ObjectNotOwned" and f"Queue {name}" in queue_ready["message"]
        assert tenants_api.condition(body, "Ready")["reason"] == "ObjectNotOwned"
        live = plane.cluster_object("scheduling.run.ai", "v2", "queues", name)
        assert "gputenant.io/tenant" not in (live["metadata"].get("labels") or {})
        assert live["spec"]["resources"]["gpu"]["quota"] == 3 and not live["metadata"].get("ownerReferences")
        delete_tenant(plane, tenants_api, name)
        assert plane.cluster_object("scheduling.run.ai", "v2", "queues", name) is not None
    finally:
        plane.kubectl("delete", "queues.scheduling.run.ai", name, "--ignore-not-found")


def test_a_refused_control_plane_pod_carries_the_api_servers_reason(plane, tenants_api, steady):
    """The platform team's own quota in the host namespace leaves no room for the vCluster pod: the
    StatefulSet controller's FailedCreate reason reaches VClusterReady, and the tenant comes up once
    the quota is gone."""
    name, namespace = "podq-t", "tenant-podq-t"
    # Prepared by the platform team for this tenant, with its labels (the GpuTenant webhook refuses
    # a tenant whose namespace exists without them), and a quota of its own.
    plane.kubectl("create", "namespace", namespace)
    plane.kubectl("label", "namespace", namespace, "app.kubernetes.io/managed-by=gpu-tenant-operator",
                  f"gputenant.io/tenant={name}")
    plane.kubectl("create", "quota", "blocker", "-n", namespace, "--hard=pods=0")
    tenants_api.apply(tenants_api.manifest(name, "Trusted", owner="p-owner"))
    body = wait_for(lambda: (lambda b: b if tenants_api.condition(b, "VClusterReady").get("reason")
                             == "ControlPlanePodRefused" else None)(tenants_api.get(name)),
                    timeout=90, interval=0.5, what="ControlPlanePodRefused")
    message = tenants_api.condition(body, "VClusterReady")["message"]
    assert "exceeded quota: blocker" in message, message
    assert tenants_api.condition(body, "Ready")["reason"] == "ControlPlanePodRefused"
    plane.kubectl("delete", "quota", "blocker", "-n", namespace)
    tenants_api.wait_ready(name, timeout=240)
    assert_still_ready(tenants_api, steady)


def helm_questions(plane, operator, namespace: str, since: int) -> int:
    """How often the operator asked about the release (its revision Secrets) since an audit offset:
    the first thing every Helm attempt does, and what a remembered permanent failure skips."""
    return sum(event["verb"] == "list" and event["requestURI"].startswith(f"/api/v1/namespaces/{namespace}/secrets?")
               and "owner%3Dhelm" in event["requestURI"]
               for event in plane.audit_events(since) if event.get("user", {}).get("username") == operator.user)


def test_a_permanent_helm_failure_waits_for_the_retry_annotation(plane, tenants_api):
    name, namespace = "retryhelm-t", "tenant-retryhelm-t"
    operator = tenants_api.operator
    tenants_api.apply(tenants_api.manifest(name, "Trusted", owner="y-owner", vcluster={"chartVersion": "0.35.0"}))
    settled(tenants_api, name, "VClusterReady")
    quiet_from = plane.audit_offset()
    time.sleep(3 * operator.resync_seconds)  # three drift-timer passes, none of which may ask Helm
    assert helm_questions(plane, operator, namespace, quiet_from) == 0
    retried_from = plane.audit_offset()
    plane.kubectl("annotate", "gputenant", name, "gputenant.io/retry=1")
    wait_for(lambda: helm_questions(plane, operator, namespace, retried_from) or None,
             timeout=6 * operator.resync_seconds, interval=1, what="a Helm attempt after gputenant.io/retry")
    assert tenants_api.condition(tenants_api.get(name), "VClusterReady")["reason"] == "ChartVersionMismatch"
