"""The reconciler in-process (kubeplane.inprocess): create, update, resync and offboarding of
GpuTenants against the session's real API server, each condition and reason the pipeline sets
asserted through the API (status, observedGeneration) with what was and was not written. The Helm
release and the vCluster's token API are the recording TEST DOUBLES of kubeplane.inprocess; the
real-vCluster modules keep the journeys on the real chart."""

from __future__ import annotations

import pytest

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.reconcile import offboard as offboarding
from gputenant.reconcile.deletion import DeletionHeld
from gputenant.reconcile.ports import StepError
from gputenant.render.tenant_view import VIEW_CONFIGMAP
from kubeplane.builders import tenant as manifest
from kubeplane.inprocess import OPERATOR_USER, QUEUE, labelled_objects


def test_create_walks_the_control_plane_up_to_ready(op):
    name = "ip-create"
    op.apply(manifest(name))
    first = op.reconcile(name)
    assert first.wait_after is not None and not first.ready and first.retry_after is None
    assert [call[4] for call in op.releases.ensure_calls(name)] == [True]  # known absent: the first install
    # read right after Helm wrote it: the StatefulSet controller has not observed it yet, or (on a busy
    # machine) has, and its pod is not ready
    starting = op.condition(name, reasons.VCLUSTER_READY)
    assert (starting["status"], starting["reason"]) in {("False", reasons.CONTROL_PLANE_ROLLING_OUT),
                                                        ("False", reasons.CONTROL_PLANE_STARTING)}, starting
    # a StatefulSet status not yet written gets no pod event: the step looks again soon; a pod on its way
    # to ready does, and the look again is only the safety net
    assert first.wait_after == (2.0 if starting["reason"] == reasons.CONTROL_PLANE_ROLLING_OUT else 10.0), starting
    op.wait_for_pods(name)
    op.reconcile(name)
    op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.CONTROL_PLANE_STARTING)
    ready = op.assert_condition(name, reasons.READY, "False", reasons.CONTROL_PLANE_STARTING)
    assert ready["message"].startswith("VClusterReady: ")
    for part in (reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY, reasons.NETWORK_READY,
                 reasons.QUEUE_READY):
        op.assert_condition(name, part, "True", reasons.APPLIED)
    op.assert_condition(name, reasons.SHARING_READY, "True", reasons.CHOSEN_FROM_TRUST)
    assert op.get(*QUEUE, name) is not None
    assert op.condition(name, reasons.KUBECONFIG_READY) == {}  # the steps after the wait did not run
    # nobody could read the tenant's view before its control plane serves: it is not written yet
    assert op.get("v1", "ConfigMap", VIEW_CONFIGMAP, op.namespace(name)) is None
    op.serve(name, secret=False)
    op.reconcile(name)
    op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.WAITING_FOR_CONTROL_PLANE)
    op.serve(name)
    outcome = op.reconcile(name)
    assert outcome.ready and outcome.wait_after is None
    op.assert_condition(name, reasons.VCLUSTER_READY, "True", reasons.CONTROL_PLANE_UP)
    op.assert_condition(name, reasons.KUBECONFIG_READY, "True", reasons.ISSUED)
    op.assert_condition(name, reasons.ARGOCD_READY, "True", reasons.NOT_REQUESTED)
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)
    assert op.get("v1", "ConfigMap", VIEW_CONFIGMAP, op.namespace(name)) is not None
    assert len(op.releases.ensure_calls(name)) == 1
    assert [call[2] for call in op.issuer.calls if call[0] == "issue" and call[1] == name] == [("admin", "view")]
    for role in ("admin", "view"):
        assert op.get("v1", "Secret", f"{name}-kubeconfig-{role}", op.namespace(name)) is not None


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
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)
    queue = op.get(*QUEUE, name)["spec"]["resources"]["gpu"]["quota"]
    assert queue == 2 * before == after["status"]["granted"]["queue"]["quota"]
    [quota] = op.run(op.platform.list("v1", "ResourceQuota", namespace=op.namespace(name)))
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
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)
    assert len(op.releases.ensure_calls(name)) == 2


def test_argocd_registration_waits_for_its_namespace_then_registers(op):
    name, argocd_namespace = "ip-argocd", "ip-argocd-ns"
    op.apply(manifest(name, argocd={"enabled": True, "namespace": argocd_namespace}))
    outcome = op.ready_but(name, reasons.ARGOCD_READY)
    assert outcome.retry_after is not None and outcome.permanent_failure is None
    missing = op.assert_condition(name, reasons.ARGOCD_READY, "False", reasons.ARGOCD_NAMESPACE_MISSING)
    assert f"namespace {argocd_namespace}" in missing["message"]
    op.assert_condition(name, reasons.READY, "False", reasons.ARGOCD_NAMESPACE_MISSING)
    op.run(op.platform.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": argocd_namespace}}))
    try:
        assert op.reconcile(name).ready
        op.assert_condition(name, reasons.ARGOCD_READY, "True", reasons.REGISTERED)
        secret = op.get("v1", "Secret", f"gputenant-{name}", argocd_namespace) or {}
        assert secret, op.run(op.platform.list("v1", "Secret", namespace=argocd_namespace))
        assert secret["metadata"]["labels"]["argocd.argoproj.io/secret-type"] == "cluster"
        assert ("issue", name, ("argocd",), ()) in op.issuer.calls
        op.delete(name)
        assert op.run(op.platform.list("v1", "Secret", namespace=argocd_namespace,
                                       label_selector=f"gputenant.io/tenant={name}")) == []
    finally:
        op.run(op.platform.delete("v1", "Namespace", argocd_namespace))


def test_a_moved_then_disabled_argocd_registration_is_removed_where_the_status_recorded_it(op):
    """Neither namespace is Argo CD's default: the old Secret is found only through status.argocd."""
    name, first, second = "ip-argocd-move", "ip-argocd-first", "ip-argocd-second"
    for namespace in (first, second):
        op.run(op.platform.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))

    def registered() -> list[str]:
        return sorted(namespace for namespace in (first, second)
                      if op.get("v1", "Secret", naming.argocd_secret_name(name), namespace) is not None)
    try:
        op.apply(manifest(name, argocd={"enabled": True, "namespace": first}))
        assert op.ready(name)["status"]["argocd"] == {"namespace": first, "secretName": f"gputenant-{name}"}
        op.apply(manifest(name, argocd={"enabled": True, "namespace": second}))
        # a look again that runs before the spec change's own pass moves it too, not just records the new one
        assert op.reconcile(name, recheck=True).ready
        assert op.tenant(name)["status"]["argocd"] == {"namespace": second, "secretName": f"gputenant-{name}"}
        assert registered() == [second]
        op.apply(manifest(name))
        body = op.ready(name)
        assert "argocd" not in body["status"] and registered() == []
        op.assert_condition(name, reasons.ARGOCD_READY, "True", reasons.NOT_REQUESTED)
    finally:
        for namespace in (first, second):
            op.run(op.platform.delete("v1", "Namespace", namespace))


HOLD = "gputenant.io/test-hold"
"""A finalizer the tests put on an object to keep it from going while they look."""


def test_sleep_stops_the_control_plane_and_wake_starts_it(op):
    name = "ip-sleep"
    op.apply(manifest(name))
    op.ready(name)
    [pod] = op.wait_for_pods(name)
    held = {"metadata": {"finalizers": [HOLD]}}
    op.run(op.platform.patch("v1", "Pod", pod["metadata"]["name"], held, op.namespace(name)))
    op.apply(manifest(name, sleep={"asleep": True}))
    stopping = op.until(name, lambda: op.condition(name, reasons.ASLEEP).get("reason") == reasons.FALLING_ASLEEP)
    assert stopping.wait_after is not None and stopping.retry_after is None
    assert len(op.releases.ensure_calls(name)) == 2  # the values scale the control plane to zero
    op.assert_condition(name, reasons.ASLEEP, "Unknown", reasons.FALLING_ASLEEP)
    op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.ASLEEP_REASON)
    op.run(op.platform.patch("v1", "Pod", pod["metadata"]["name"], {"metadata": {"finalizers": None}},
                             op.namespace(name)))
    op.until(name, lambda: op.condition(name, reasons.ASLEEP).get("status") == "True")
    op.assert_condition(name, reasons.ASLEEP, "True", reasons.SLEEP_REQUESTED)
    op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.ASLEEP_REASON)
    op.assert_condition(name, reasons.READY, "False", reasons.ASLEEP_REASON)
    assert op.run(op.platform.list("v1", "Pod", namespace=op.namespace(name))) == []
    assert op.get(*QUEUE, name) is not None  # the Queue and the quota stay
    op.apply(manifest(name, sleep={"asleep": False}))
    op.reconcile(name)
    op.wait_for_pods(name)
    op.reconcile(name)
    op.assert_condition(name, reasons.ASLEEP, "Unknown", reasons.WAKING)
    waking = op.condition(name, reasons.VCLUSTER_READY)
    assert waking["status"] == "False" and waking["message"].startswith("waking: "), waking
    assert waking["reason"] in (reasons.CONTROL_PLANE_STARTING, reasons.CONTROL_PLANE_ROLLING_OUT), waking
    op.ready(name)
    op.assert_condition(name, reasons.ASLEEP, "False", reasons.AWAKE)
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)


def test_offboarding_uninstalls_first_sweeps_then_deletes_the_namespace_and_lets_go(op, plane):
    name = "ip-gone"
    op.apply(manifest(name, trust="Untrusted"))
    op.ready(name)
    release_objects = op.run(op.platform.list("v1", "Secret", namespace=op.namespace(name),
                                              label_selector=f"gputenant.io/tenant={name}"))
    assert release_objects
    op.delete(name, finish=False)
    assert op.tenant(name)["metadata"]["deletionTimestamp"]  # held by kopf's finalizer
    since = plane.audit_offset()
    op.offboard(name)
    assert op.tenant(name) is None  # the finalizer let go
    assert op.releases.calls[-1] == ("uninstall", name, op.namespace(name))
    deletes = [(event["objectRef"]["resource"], event["objectRef"].get("name"))
               for event in plane.audit_events(since)
               if event["verb"] == "delete" and event.get("stage") == "ResponseComplete"
               and event.get("user", {}).get("username") in (OPERATOR_USER, "kubeplane-admin")
               and (event["objectRef"].get("namespace") in (op.namespace(name), None))]
    resources = [resource for resource, _ in deletes]
    assert resources[0] == "statefulsets", deletes  # Helm's uninstall before anything the operator sweeps
    assert resources[-1] == "namespaces" and ("queues", name) in deletes, deletes
    assert resources.index("queues") > max(i for i, r in enumerate(resources) if r == "secrets"), deletes
    assert op.get("v1", "Namespace", op.namespace(name)) is None
    assert op.get(*QUEUE, name) is None
    assert labelled_objects(plane, name) == []


def test_offboarding_waits_for_a_terminating_namespace_then_lets_go(op, monkeypatch):
    """A namespace that takes long to go (here: a finalizer of the test's) is NamespaceTerminating,
    which kopf retries with the tenant's finalizer held; once it is gone the tenant is let go."""
    name = "ip-slowns"
    op.apply(manifest(name))
    op.ready(name)
    op.run(op.platform.patch("v1", "Namespace", op.namespace(name), {"metadata": {"finalizers": [HOLD]}}))
    monkeypatch.setattr(offboarding, "NAMESPACE_WAIT_SECONDS", 1.0)
    op.delete(name, finish=False)
    with pytest.raises(StepError) as waiting:
        op.offboard(name)
    assert (waiting.value.reason, waiting.value.transient) == (reasons.NAMESPACE_TERMINATING, True)
    assert op.tenant(name)["metadata"]["finalizers"]  # still held: kopf retries the deletion
    op.run(op.platform.patch("v1", "Namespace", op.namespace(name), {"metadata": {"finalizers": None}}))
    monkeypatch.setattr(offboarding, "NAMESPACE_WAIT_SECONDS", 60.0)
    op.offboard(name)
    assert op.tenant(name) is None and op.get("v1", "Namespace", op.namespace(name)) is None


def test_prevent_deletion_holds_the_cells_deletion_path_and_reports_it_once(op):
    """The deletion path kopf's handler runs (`Cell.offboard`): held, reported once in status and an
    Event, and let go once spec.preventDeletion is false."""
    name = "ip-held"
    op.apply(manifest(name, preventDeletion=True))
    op.reconcile(name)
    op.delete(name, finish=False)
    with pytest.raises(DeletionHeld):
        op.offboard(name)
    assert op.condition(name, reasons.DELETION_PREVENTED)["status"] == "True"
    writes = op.writes()
    with pytest.raises(DeletionHeld):
        op.offboard(name)
    assert op.writes() == writes  # reported once: no second status write, no second Event
    op.run(op.platform.patch("gputenant.io/v1alpha1", "GpuTenant", name, {"spec": {"preventDeletion": False}}))
    op.offboard(name)
    assert op.tenant(name) is None and op.get("v1", "Namespace", op.namespace(name)) is None


def test_retain_keeps_the_namespace_without_the_tenants_labels(op, plane):
    name = "ip-keep"
    op.apply(manifest(name, deletionPolicy="Retain"))
    op.ready(name)
    op.delete(name)
    assert op.tenant(name) is None
    kept = op.get("v1", "Namespace", op.namespace(name))
    assert kept is not None and kept["metadata"].get("deletionTimestamp") is None
    assert "gputenant.io/tenant" not in (kept["metadata"].get("labels") or {})
    assert not [ref for ref in kept["metadata"].get("ownerReferences") or [] if ref["kind"] == "GpuTenant"]
    assert labelled_objects(plane, name) == []
    assert op.releases.calls[-1] == ("uninstall", name, op.namespace(name))
    op.run(op.platform.delete("v1", "Namespace", op.namespace(name)))


def test_a_deleted_managed_object_is_repaired_with_a_drift_event(op):
    name = "ip-drift"
    body = op.apply(manifest(name))
    op.ready(name)
    op.reconcile(name)
    [quota] = op.run(op.platform.list("v1", "ResourceQuota", namespace=op.namespace(name)))
    op.run(op.platform.delete("v1", "ResourceQuota", quota["metadata"]["name"], op.namespace(name)))
    outcome = op.reconcile(name)
    assert outcome.ready and not outcome.status_written
    assert [key[1] for key in outcome.applied] == ["ResourceQuota"]
    assert op.get("v1", "ResourceQuota", quota["metadata"]["name"], op.namespace(name)) is not None
    events = op.run(op.platform.list("v1", "Event", namespace="default"))
    assert any(event["reason"] == reasons.DRIFT_REPAIRED and event["involvedObject"]["uid"] == body["metadata"]["uid"]
               for event in events)


def test_the_issuers_ca_configmap_goes_once_the_control_plane_no_longer_mounts_it(op, plane):
    name = "ip-oidc-ca"
    oidc = {"issuerURL": "https://issuer.example", "clientID": "gputenant", "caBundle": plane.ca_pem.decode()}
    op.apply(manifest(name, vcluster={"oidc": oidc}))
    op.ready(name)
    ca = op.get("v1", "ConfigMap", naming.OIDC_CA_CONFIGMAP, op.namespace(name))
    assert ca is not None and ca["data"]["ca.crt"] == oidc["caBundle"]
    op.apply(manifest(name))
    op.reconcile(name)  # the upgrade without the CA volume: its pod still runs the old revision
    assert op.get("v1", "ConfigMap", naming.OIDC_CA_CONFIGMAP, op.namespace(name)) is not None
    op.ready(name)
    assert op.get("v1", "ConfigMap", naming.OIDC_CA_CONFIGMAP, op.namespace(name)) is None
    assert len(op.releases.ensure_calls(name)) == 2


def test_a_look_again_while_the_control_plane_starts_leaves_converged_object_steps_alone(op, plane):
    name = "ip-recheck"
    op.apply(manifest(name))
    op.reconcile(name)
    op.wait_for_pods(name)
    since = plane.audit_offset()
    outcome = op.reconcile(name, recheck=True)
    assert outcome.skipped == [reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY,
                               reasons.NETWORK_READY, reasons.QUEUE_READY]
    requests = {(event["verb"], (event.get("objectRef") or {}).get("resource")) for event in plane.audit_events(since)
                if event.get("user", {}).get("username") == OPERATOR_USER}
    assert ("get", "statefulsets") in requests  # the vCluster step still looks at its control plane
    assert ("list", "secrets") not in requests  # but not at Helm's records of the values hash it installed
    assert not {resource for _, resource in requests} & {"namespaces", "resourcequotas", "limitranges",
                                                         "networkpolicies", "roles", "rolebindings", "queues"}, requests
    for part in outcome.skipped:
        op.assert_condition(name, part, "True", reasons.APPLIED)
    # a pass that is no look again (an update, the resync timer) still checks every object step and Helm
    since = plane.audit_offset()
    assert op.reconcile(name).skipped == []
    assert any(event["verb"] == "list" and (event.get("objectRef") or {}).get("resource") == "secrets"
               and "owner%3Dhelm" in event.get("requestURI", "") for event in plane.audit_events(since)
               if event.get("user", {}).get("username") == OPERATOR_USER)
    # a new generation: no step's condition is True at it, so a look again checks every step
    op.apply(manifest(name, gpus=2))
    changed = op.reconcile(name, recheck=True)
    assert reasons.QUOTA_READY not in changed.skipped
    assert op.get(*QUEUE, name)["spec"]["resources"]["gpu"]["quota"] == op.tenant(name)["status"]["granted"]["queue"]["quota"]
    op.ready(name)


def test_the_pass_that_creates_the_namespace_lists_nothing_in_it_and_the_next_one_does(op, plane):
    """A namespace the pass itself created (the API server answered its apply with 201) holds no
    labelled object the pass did not write, so its kinds are not listed, nor Helm's records in it;
    once it exists, they are. The tenant's Queue is read by name, never listed; the tenant itself
    is read again only after a pass of this process wrote its status, and only when the body handed
    over is not the version that write made."""
    name = "ip-fresh"

    def namespaced_lists(since: int) -> set[str]:
        return {event["objectRef"]["resource"] for event in plane.audit_events(since)
                if event.get("user", {}).get("username") == OPERATOR_USER and event["verb"] == "list"
                and (event.get("objectRef") or {}).get("namespace") == op.namespace(name)}

    def own_requests(since: int, resource: str) -> list[str]:
        return [event["verb"] for event in plane.audit_events(since)
                if event.get("user", {}).get("username") == OPERATOR_USER
                and (event.get("objectRef") or {}).get("resource") == resource]

    created = op.apply(manifest(name))
    since = plane.audit_offset()
    op.reconcile(name)
    assert namespaced_lists(since) <= {"pods"}, \
        "only the vCluster step's control-plane read lists there: Helm keeps no record in a namespace this pass created"
    assert "get" not in own_requests(since, "gputenants"), "kopf's body is the newest this process knows of"
    assert own_requests(since, "namespaces") == ["patch"], "a tenant without status has no namespace to read"
    assert sorted(own_requests(since, "queues")) == ["get", "patch"], "one GET tells absent from someone else's"
    for part in (reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY, reasons.NETWORK_READY):
        op.assert_condition(name, part, "True", reasons.APPLIED)
    written = {line.split("/", 1)[0].split(".", 1)[0] for line in labelled_objects(plane, name)}
    assert {"resourcequota", "limitrange", "networkpolicy", "role", "rolebinding"} <= written, written
    since = plane.audit_offset()
    op.reconcile(name)
    assert {"resourcequotas", "limitranges", "networkpolicies", "roles", "rolebindings"} <= namespaced_lists(since)
    assert "get" not in own_requests(since, "gputenants"), "the body is the version its own status write made"
    assert own_requests(since, "queues") == ["get"]
    since = plane.audit_offset()
    op.run(op.reconciler.reconcile(created))  # a body older than this process's last status write
    assert own_requests(since, "gputenants").count("get") == 1, "after a pass of its own, the live status is read"


def test_a_look_again_leaves_removing_argo_cd_registrations_to_full_passes(op, plane):
    """A registration moves or ends with a spec change, whose own (full) pass removes it: the looks
    again at a starting control plane do not list Argo CD's namespace for leftovers."""
    name = "ip-look-argocd"

    def argocd_lists(since: int) -> int:
        return sum(1 for event in plane.audit_events(since)
                   if event.get("user", {}).get("username") == OPERATOR_USER and event["verb"] == "list"
                   and (event.get("objectRef") or {}).get("namespace") == "argocd")

    op.apply(manifest(name))
    op.reconcile(name)
    since = plane.audit_offset()
    for _ in range(100):
        if op.reconcile(name, recheck=True).ready:
            break
        op.serve(name)
    op.assert_condition(name, reasons.ARGOCD_READY, "True", reasons.NOT_REQUESTED)
    assert argocd_lists(since) == 0
    since = plane.audit_offset()
    op.reconcile(name)
    assert argocd_lists(since) == 1
