"""Every way a pass can fail, in-process (kubeplane.inprocess) against the session's real API
server: each failure ends as its step's condition False with its own reason, at the tenant's
generation, summarised by Ready, with what was (not) written; a permanent one waits for the input
to change, a transient one is retried with backoff. Helm and the vCluster's token API are the
recording TEST DOUBLES; what they raise is translated by the real adapters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputenant.api import conditions as reasons
from gputenant.helm import HelmError, InvalidValuesError, TransientHelmError, UpgradePathError
from gputenant.helm.errors import (
    ChartNotFoundError,
    ChartVersionMismatchError,
    HelmAdmissionDeniedError,
    HelmForbiddenError,
)
from gputenant.kube import ApiError
from gputenant.kubeconfigs import KubeconfigIssueError
from gputenant.reconcile.memory import RETRY_ANNOTATION
from kubeplane import wait_for
from kubeplane.builders import tenant as manifest
from kubeplane.inprocess import OPERATOR_USER, QUEUE

WITHHELD = (reasons.NETWORK_READY, reasons.QUEUE_READY)
"""The parts the renderer withholds while the sharing policy is impossible."""


def written(plane, since: int) -> set[tuple[str, str]]:
    """(resource, subresource) of every write of the in-process operator since an audit offset."""
    return {(event["objectRef"]["resource"], event["objectRef"].get("subresource", ""))
            for event in plane.audit_events(since)
            if event.get("user", {}).get("username") == OPERATOR_USER and event["verb"] not in ("get", "list", "watch")
            and event.get("stage") == "ResponseComplete"}


STEADY = "ip-steady"


@pytest.fixture(scope="module")
def steady(inprocess) -> dict:
    """A tenant that must stay Ready, untouched, whatever happens to the others."""
    inprocess.releases.failure = inprocess.issuer.failure = inprocess.issuer.silence = None
    inprocess.apply(manifest(STEADY))
    inprocess.ready(STEADY)
    inprocess.reconcile(STEADY)  # settles the tenant view
    return inprocess.condition(STEADY, reasons.READY)


@pytest.fixture(autouse=True)
def steady_stays_ready(op, steady):
    """After each test: the steady tenant's pass is still Ready with nothing to write; no failure of
    another tenant (its remembered backoff or Helm stop) reaches it."""
    yield
    op.releases.failure = op.issuer.failure = op.issuer.silence = None
    writes = op.writes()
    outcome = op.reconcile(STEADY)
    assert outcome.ready and outcome.retry_after is None and op.writes() == writes
    assert op.condition(STEADY, reasons.READY) == steady


def test_requests_above_limits_are_refused_by_the_crd_naming_the_field(op):
    manifest_ = manifest("ip-overreq", vcluster={"resources": {
        "requests": {"cpu": "4", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}})
    with pytest.raises(ApiError) as refused:
        op.apply(manifest_)
    message = str(refused.value)
    assert "spec.vcluster.resources.requests.cpu" in message and "must not exceed limits.cpu" in message, message
    assert op.tenant("ip-overreq") is None


def test_an_invalid_spec_is_a_condition_and_nothing_is_applied(op):
    """A spec stored before the CRD checked a field (here the token lifetime) reaches the pipeline;
    the operator's own validation names the field and applies nothing."""
    name = "ip-invalid"
    body = op.apply(manifest(name))
    stale = {**body, "spec": {**body["spec"], "kubeconfig": {**body["spec"].get("kubeconfig", {}),
                                                              "tokenLifetime": "forever"}}}
    outcome = op.run(op.reconciler.reconcile(stale))
    assert outcome.permanent_failure == reasons.INVALID_SPEC and outcome.retry_after is None
    found = op.assert_condition(name, reasons.NAMESPACE_READY, "False", reasons.INVALID_SPEC)
    assert "spec.kubeconfig.tokenLifetime" in found["message"], found
    op.assert_condition(name, reasons.READY, "False", reasons.INVALID_SPEC)
    assert outcome.applied == [] and op.get("v1", "Namespace", op.namespace(name)) is None
    assert op.releases.ensure_calls(name) == []


def test_a_spec_the_renderer_refuses_is_a_condition_with_nothing_applied(op, plane):
    """Admitted by the CRD (limits without cpu), refused by rendering: RenderFailed naming the field;
    the only writes are the status and its Events."""
    name = "ip-norender"
    op.apply(manifest(name, vcluster={"resources": {"limits": {"memory": "2Gi"}}}))
    since = plane.audit_offset()
    outcome = op.reconcile(name)
    assert outcome.permanent_failure == reasons.RENDER_FAILED
    found = op.assert_condition(name, reasons.NAMESPACE_READY, "False", reasons.RENDER_FAILED)
    assert "spec.vcluster.resources.limits.cpu" in found["message"]
    op.assert_condition(name, reasons.READY, "False", reasons.RENDER_FAILED)
    assert op.get("v1", "Namespace", op.namespace(name)) is None and outcome.applied == []
    assert outcome.status_written
    assert written(plane, since) == {("gputenants", "status"), ("events", "")}
    assert op.releases.ensure_calls(name) == []


@pytest.mark.parametrize("name, spec, reason, named", [
    ("ip-smallcpu", {"quotas": {"cpu": "100m"}}, reasons.QUOTA_BELOW_CONTROL_PLANE,
     ("quotas.cpu 100m", "limited to 2", "vcluster.resources.limits.cpu")),
    ("ip-wrongpool", {"sharing": {"mode": "TimeSlicing"}, "gpu": {"quota": 1, "pool": "h100-mig-small"}},
     reasons.POOL_MODE_MISMATCH, ("gpu.pool h100-mig-small", "a100-timeslice")),
    ("ip-nopool", {"gpu": {"quota": 1, "pool": "no-such-pool"}}, reasons.POOL_NOT_FOUND, ("no-such-pool",)),
    ("ip-toobig", {"gpu": {"quota": 1000}}, reasons.QUOTA_ABOVE_POOL_CAPACITY, ()),
    ("ip-pooltrust", {"sharing": {"mode": "MIG"}, "gpu": {"quota": 1, "pool": "h100-mig-small"}},
     reasons.POOL_TRUST_MISMATCH, ("gpu.pool h100-mig-small",)),
    ("ip-parentq", {"gpu": {"quota": 1, "parentQueue": "nope"}}, reasons.PARENT_QUEUE_NOT_ALLOWED,
     ("gpu.parentQueue nope",)),
    ("ip-fraction", {"gpu": {"quota": 0.3}}, reasons.FRACTION_NOT_GRANTABLE, ("whole replicas",)),
])
def test_an_impossible_policy_withholds_parts_with_its_reason(op, name, spec, reason, named):
    """SharingReady carries the policy's reason and stops the pass; the parts the renderer withholds
    (network, Queue) carry it too, the namespace, quota and RBAC are in place, no Queue, no Helm."""
    op.apply(manifest(name, **spec))
    outcome = op.reconcile(name)
    assert outcome.permanent_failure == reason and outcome.retry_after is None
    sharing = op.assert_condition(name, reasons.SHARING_READY, "False", reason)
    ready = op.assert_condition(name, reasons.READY, "False", reason)
    for words in named:
        assert words in ready["message"] and words in sharing["message"], ready["message"]
    for withheld in WITHHELD:
        op.assert_condition(name, withheld, "False", reason)
    for applied in (reasons.NAMESPACE_READY, reasons.QUOTA_READY, reasons.RBAC_READY):
        assert op.assert_condition(name, applied, "True", reasons.APPLIED)["message"].startswith("in place:")
    assert op.condition(name, reasons.VCLUSTER_READY) == {}
    assert op.get(*QUEUE, name) is None and op.releases.ensure_calls(name) == []


@pytest.mark.parametrize("name, spec, reason", [
    ("ip-explicit", {"sharing": {"mode": "TimeSlicing"}}, reasons.EXPLICIT_MODE),
    ("ip-trust", {}, reasons.CHOSEN_FROM_TRUST),
    ("ip-nogpu", {"gpus": 0}, reasons.NO_GPU_REQUESTED),
    ("ip-fallback", {"trust": "Internal", "gpu": {"quota": 1, "pool": "h100-mig-small"}},
     reasons.FALLBACK_TO_STRONGER_MODE),
])
def test_a_possible_policy_names_how_it_chose(op, name, spec, reason):
    op.apply(manifest(name, **spec))
    op.reconcile(name)
    op.assert_condition(name, reasons.SHARING_READY, "True", reason)


HELM_FAILURES = [
    HelmError("helm (test double): an error Helm gave no name"),
    TransientHelmError("helm (test double): another operation is in progress"),
    HelmForbiddenError.of("StatefulSet ip-x", 'statefulsets.apps is forbidden: User "op" cannot create'),
    HelmAdmissionDeniedError.of("StatefulSet ip-x", 'admission webhook "guard" denied the request'),
    InvalidValuesError("helm (test double): values don't meet the chart's schema"),
    ChartNotFoundError("helm (test double): chart not found"),
    ChartVersionMismatchError("helm (test double): the chart is 0.36.1, not 0.35.0"),
    UpgradePathError("helm (test double): 0.36.1 to 0.30.0 is a downgrade", installed="0.36.1", wanted="0.30.0"),
]


def helm_questions(plane, namespace: str, since: int) -> int:
    """How often the operator asked about the release (its revision Secrets) since an audit offset:
    the first thing every Helm attempt does, and what a remembered permanent failure skips."""
    return sum(event["verb"] == "list" and event["requestURI"].startswith(f"/api/v1/namespaces/{namespace}/secrets?")
               and "owner%3Dhelm" in event["requestURI"]
               for event in plane.audit_events(since) if event.get("user", {}).get("username") == OPERATOR_USER)


@pytest.mark.parametrize("error", HELM_FAILURES, ids=lambda error: error.reason)
def test_each_helm_failure_is_its_own_reason(op, plane, error):
    """Permanent: no Helm call until the retry annotation changes (the message says so); transient:
    retried with a growing backoff."""
    name = f"ip-helm-{error.reason.lower()}"
    op.apply(manifest(name))
    op.releases.fail_with(error)
    first = op.reconcile(name)
    failed = op.assert_condition(name, reasons.VCLUSTER_READY, "False", error.reason)
    op.assert_condition(name, reasons.READY, "False", error.reason)
    assert op.condition(name, reasons.KUBECONFIG_READY) == {}
    assert len(op.releases.ensure_calls(name)) == 1
    since = plane.audit_offset()
    second = op.reconcile(name)
    if error.transient:
        assert first.retry_after == 5.0 and second.retry_after == 10.0 and first.permanent_failure is None
        assert len(op.releases.ensure_calls(name)) == 2
        return
    assert first.permanent_failure == error.reason and first.retry_after is None
    assert RETRY_ANNOTATION in failed["message"], failed
    assert len(op.releases.ensure_calls(name)) == 1  # remembered: no Helm until an input changes
    assert helm_questions(plane, op.namespace(name), since) == 0
    op.releases.failure = None
    op.annotate(name, {RETRY_ANNOTATION: "1"})
    op.ready(name)
    assert len(op.releases.ensure_calls(name)) == 2
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)


def test_a_tenant_recreated_valid_after_a_permanent_helm_failure_goes_ready(op):
    """Deleted and created again under the same name, the tenant must not inherit the failure."""
    name = "ip-rehelm"
    op.apply(manifest(name, vcluster={"chartVersion": "0.35.0"}))
    op.releases.fail_with(ChartVersionMismatchError("helm (test double): the chart is 0.36.1, not 0.35.0"))
    op.reconcile(name)
    failed = op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.CHART_VERSION_MISMATCH)
    assert RETRY_ANNOTATION in failed["message"]
    op.releases.failure = None
    op.delete(name)
    op.apply(manifest(name))
    op.ready(name)
    op.assert_condition(name, reasons.READY, "True", reasons.TENANT_READY)


def test_vcluster_and_kubeconfig_failures_after_the_control_plane_started(op):
    name = "ip-kubeconfig"
    op.apply(manifest(name))
    op.reconcile(name)
    op.wait_for_pods(name)
    op.serve(name)
    op.issuer.silence = "dial tcp: connection refused (test double)"
    waiting = op.reconcile(name)
    assert waiting.wait_after is not None and waiting.retry_after is None
    found = op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.CONTROL_PLANE_NOT_ANSWERING)
    assert "connection refused" in found["message"]
    op.issuer.silence = None

    op.issuer.failure = KubeconfigIssueError("the virtual cluster answered 503", transient=True)
    retried = op.reconcile(name)
    assert retried.retry_after is not None and retried.permanent_failure is None
    op.assert_condition(name, reasons.VCLUSTER_READY, "True", reasons.CONTROL_PLANE_UP)
    found = op.assert_condition(name, reasons.KUBECONFIG_READY, "False", reasons.TOKEN_REQUEST_FAILED)
    assert f"in the virtual cluster of {name}" in found["message"]
    op.assert_condition(name, reasons.READY, "False", reasons.TOKEN_REQUEST_FAILED)

    op.issuer.failure = ValueError("the admin kubeconfig names no server")
    stopped = op.reconcile(name)
    assert stopped.permanent_failure == reasons.INVALID_KUBECONFIG_INPUT
    op.assert_condition(name, reasons.KUBECONFIG_READY, "False", reasons.INVALID_KUBECONFIG_INPUT)
    assert op.get("v1", "Secret", f"{name}-kubeconfig-admin", op.namespace(name)) is None

    op.issuer.failure = None
    assert op.reconcile(name).ready
    op.run(op.releases.write_admin_secret(name, op.namespace(name), "- not\n- a kubeconfig"))
    broken = op.reconcile(name)
    assert broken.retry_after is not None
    found = op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.INVALID_KUBECONFIG_INPUT)
    assert f"vc-{name}" in found["message"]
    op.assert_condition(name, reasons.READY, "False", reasons.INVALID_KUBECONFIG_INPUT)


def test_a_refused_control_plane_pod_carries_the_api_servers_reason(op):
    """The platform team's own quota in the host namespace leaves no room for the control-plane pod:
    the StatefulSet controller's FailedCreate reaches VClusterReady; the tenant comes up once the
    quota is gone."""
    name = "ip-podq"
    namespace = op.namespace(name)
    op.run(op.platform.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
        "app.kubernetes.io/managed-by": "gpu-tenant-operator", "gputenant.io/tenant": name}}}))
    op.run(op.platform.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                              "metadata": {"name": "blocker", "namespace": namespace}, "spec": {"hard": {"pods": "0"}}}))
    op.apply(manifest(name))
    op.until(name, lambda: op.condition(name, reasons.VCLUSTER_READY).get("reason")
             == reasons.CONTROL_PLANE_POD_REFUSED, passes=150)
    found = op.assert_condition(name, reasons.VCLUSTER_READY, "False", reasons.CONTROL_PLANE_POD_REFUSED)
    assert "exceeded quota: blocker" in found["message"], found
    op.assert_condition(name, reasons.READY, "False", reasons.CONTROL_PLANE_POD_REFUSED)
    op.run(op.platform.delete("v1", "ResourceQuota", "blocker", namespace))
    op.ready(name)


def foreign_queue(name: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"displayName": "a department's own queue",
                     "resources": {"gpu": {"quota": 3, "limit": -1, "overQuotaWeight": 1},
                                   "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                   "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


def test_a_queue_someone_else_made_under_the_tenants_name_is_neither_taken_nor_deleted(op):
    name = "ip-deptq"
    op.apply(manifest(name))
    op.ready(name)
    op.run(op.platform.delete(*QUEUE, name))
    op.run(op.platform.create(foreign_queue(name)))
    try:
        outcome = op.reconcile(name)
        assert outcome.retry_after is not None
        found = op.assert_condition(name, reasons.QUEUE_READY, "False", reasons.OBJECT_NOT_OWNED)
        assert f"Queue {name}" in found["message"]
        op.assert_condition(name, reasons.READY, "False", reasons.OBJECT_NOT_OWNED)
        live = op.get(*QUEUE, name)
        assert "gputenant.io/tenant" not in (live["metadata"].get("labels") or {})
        assert live["spec"]["resources"]["gpu"]["quota"] == 3 and not live["metadata"].get("ownerReferences")
        op.delete(name)
        assert op.get(*QUEUE, name) is not None
    finally:
        op.run(op.platform.delete(*QUEUE, name))


def refused(plane, manifest: dict) -> bool:
    """Whether the API server refuses `manifest` now (a server-side dry run)."""
    return plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(manifest), check=False).returncode != 0


def test_an_object_the_api_server_refuses_is_apply_rejected(op, plane):
    """An admission policy of the platform refuses the tenant's NetworkPolicies: NetworkReady False
    ApplyRejected with the API server's words, the steps before it in place."""
    name = "ip-rejected"
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": "ip-no-netpol"},
              "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
                  "apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                  "resources": ["networkpolicies"]}]},
                  "validations": [{"expression": "false", "message": "no NetworkPolicy here (platform policy)"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": "ip-no-netpol"},
               "spec": {"policyName": "ip-no-netpol", "validationActions": ["Deny"],
                        "matchResources": {"objectSelector": {"matchLabels": {"gputenant.io/tenant": name}}}}}
    op.run(op.platform.apply(policy))
    op.run(op.platform.apply(binding))
    probe = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "probe", "namespace": "default", "labels": {"gputenant.io/tenant": name}},
             "spec": {"podSelector": {}}}
    try:
        wait_for(lambda: refused(plane, probe), timeout=30, interval=0.3, what="the admission policy in force")
        op.apply(manifest(name))
        outcome = op.until(name, lambda: op.condition(name, reasons.NETWORK_READY).get("status") == "False",
                           passes=50)
        assert outcome.permanent_failure == reasons.APPLY_REJECTED
        found = op.assert_condition(name, reasons.NETWORK_READY, "False", reasons.APPLY_REJECTED)
        assert "no NetworkPolicy here" in found["message"], found
        op.assert_condition(name, reasons.READY, "False", reasons.APPLY_REJECTED)
        op.assert_condition(name, reasons.RBAC_READY, "True", reasons.APPLIED)
        assert op.releases.ensure_calls(name) == []
    finally:
        op.run(op.platform.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "ip-no-netpol"))
        op.run(op.platform.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "ip-no-netpol"))


NOT_SET_BY_THE_PIPELINE = {
    "ATTESTED", "ATTESTATION_FAILED", "UNATTESTED",  # IsolationVerified: the attestation loop
    "NO_IDLE_POLICY", "GPUS_WORKING", "IDLE_NOT_LONG_ENOUGH", "NON_PREEMPTIBLE_WORKLOAD",  # idle verdicts
    "KUBECONFIG_ISSUED", "ARGOCD_TOKEN_ISSUED", "MIG_RECONFIGURATION_BLOCKED",  # Events only
    "GANG_GROUP_REFUSED", "GPU_POD_PENDING", "GPU_MEMORY_HELD_BY_NO_ONE", "GPU_MEMORY_RELEASED",
    "PREVENT_DELETION_SET",  # DeletionPrevented: kopf's deletion handler (test_operator_changes.py)
    # a fleet's hub (no pipeline runs there): test_fleet_placement.py, test_fleet_view.py, test_fleet.py
    "PLACED", "NO_MEMBER_FITS", "MEMBER_NOT_REGISTERED", "NOT_SELECTED", "CORDONED", "NAME_TAKEN", "MOVING",
    "MEMBER_UNREACHABLE", "REPORT_STALE", "REPORT_UNREADABLE", "POOL_NOT_REPORTED", "POOL_HAS_PROBLEMS",
    "NO_CAPACITY", "DELIVERING", "MEMBER_STATUS",
}
"""Reasons of api/conditions.py that no reconcile pass sets."""
ASSERTED_ELSEWHERE = {
    "API_UNAVAILABLE": "needs an API server that does not answer, which cannot take the status either "
                       "(test_operator_outage.py, test_metrics_dashboard.py)",
    "WAITING_FOR_ACCESS": "needs the chart's RBAC and an authorizer slower than the operator's review",
    "NOT_APPLIED": "the renderer withholding a step of a possible decision (test_reconcile_conditions.py)",
    "PROGRESSING": "Ready while parts are pending (test_reconcile_conditions.py)",
    "WOKEN_ON_REQUEST": "an owner's wake request from inside the virtual cluster (test_sleep_wake.py)",
    "IDLE_GPUS": "the idle policy's sleep (test_usage.py)",
    "LOAD_BALANCER_PENDING": "a LoadBalancer Service no implementation has given an address yet; with the "
                             "real MetalLB (test_exposure_loadbalancer.py) and the step's unit tests",
    **{name: ("a decision the CRD or this config cannot reach here; the policy's unit tests (test_policy.py, "
              "test_policy_amounts.py)")
       for name in ("MODE_NOT_ALLOWED_FOR_TRUST", "LIMIT_BELOW_QUOTA", "QUEUE_NAME_IS_PARENT_QUEUE",
                    "POOL_MODEL_MISMATCH", "NO_POOL_FOR_MODE", "PROFILE_NOT_ON_GPU", "PROFILE_NOT_IN_POOL",
                    "HAMI_SHARE_TOO_SMALL", "MEMORY_ABOVE_GPU")},
}
"""Reasons the pipeline sets that this tier does not assert, and where they are."""


def test_every_reason_the_pipeline_sets_is_asserted_in_process():
    """Each reason of api/conditions.py is asserted by an in-process test (named as reasons.X in
    these modules), or listed above with why not and where it is asserted instead."""
    here = Path(__file__).parent
    sources = "".join((here / module).read_text() for module in (
        "test_reconciler_inprocess.py", "test_reconciler_inprocess_failures.py"))
    declared = {name for name, value in vars(reasons).items() if name.isupper() and isinstance(value, str)}
    types = {name for name in declared if getattr(reasons, name) in (*reasons.PART_CONDITIONS, reasons.READY)
             or name in ("DELETION_PREVENTED", "ISOLATION_VERIFIED", "ASLEEP")}
    asserted = {name for name in declared if f"reasons.{name}" in sources
                or getattr(reasons, name) in {error.reason for error in HELM_FAILURES}}  # Helm's by parameter
    missing = declared - types - NOT_SET_BY_THE_PIPELINE - set(ASSERTED_ELSEWHERE) - asserted
    assert not missing, sorted(missing)
    assert not asserted & set(ASSERTED_ELSEWHERE), "asserted here now: drop it from ASSERTED_ELSEWHERE"
