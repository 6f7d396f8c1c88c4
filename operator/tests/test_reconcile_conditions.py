"""Condition bookkeeping and the pure helpers of the pipeline."""

from datetime import timedelta

import pytest

from gputenant.kubeconfigs import issue_reason
from gputenant.kubeconfigs import token_lifetime as parse_duration
from gputenant.reconcile.ownership import adopt
from gputenant.reconcile.steps import condition_of as stage_of
from gputenant.reconcile.steps import not_applied
from gputenant.tenant_status import conditions as cond
from gputenant.timefmt import parse_rfc3339 as parse_timestamp

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_transition_time_moves_only_when_status_changes():
    first = cond.set_condition([], "QueueReady", "False", "Pending", "a", 1, T0)
    same = cond.set_condition(first, "QueueReady", "False", "Other", "b", 2, T1)
    assert same[0].last_transition_time == T0 and same[0].reason == "Other"
    flipped = cond.set_condition(same, "QueueReady", "True", "Applied", "", 2, T1)
    assert flipped[0].last_transition_time == T1 and flipped[0].status is cond.ConditionStatus.TRUE


def test_ready_summarises_the_first_false_part_then_pending_then_true():
    conditions = []
    for part in cond.PART_CONDITIONS:
        conditions = cond.set_condition(conditions, part, "True", "Applied", "", 1, T0)
    assert cond.summarise_ready(conditions)[:2] == ("True", "TenantReady")
    pending = cond.remove_condition(conditions, "KubeconfigReady")
    assert cond.summarise_ready(pending)[:2] == ("Unknown", "Progressing")
    failed = cond.set_condition(pending, "SharingReady", "False", "NoPoolForMode", "add a pool", 1, T0)
    assert cond.summarise_ready(failed) == (cond.ConditionStatus.FALSE, "NoPoolForMode", "SharingReady: add a pool")


def test_ordered_puts_ready_first_then_pipeline_order():
    conditions = [cond.Condition(type=t, status="True", reason="R", last_transition_time=T0)
                  for t in ("VClusterReady", "Ready", "NamespaceReady", "DeletionPrevented")]
    assert [c.type for c in cond.ordered(conditions)] == [
        "Ready", "NamespaceReady", "VClusterReady", "DeletionPrevented"]


def test_a_condition_round_trips_between_the_api_servers_json_and_the_typed_model():
    raw = {"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "waiting for QuotaReady",
           "lastTransitionTime": T0, "observedGeneration": 4}
    typed = cond.parse([raw])
    assert typed[0].status is cond.ConditionStatus.UNKNOWN and typed[0].observed_generation == 4
    assert cond.as_status(typed) == [raw]


def test_a_condition_that_does_not_validate_is_dropped_not_fatal():
    bad = [{"type": "Ready", "status": "Maybe", "reason": "X", "lastTransitionTime": T0},
           {"type": "QueueReady", "status": "True", "reason": "Applied", "lastTransitionTime": T0}]
    assert [c.type for c in cond.parse(bad)] == ["QueueReady"]


def test_a_boolean_outcome_becomes_a_condition_status():
    assert [cond.status_of(ok) for ok in (True, False, None)] == [
        cond.ConditionStatus.TRUE, cond.ConditionStatus.FALSE, cond.ConditionStatus.UNKNOWN]


def test_each_writer_applies_only_the_condition_types_it_owns():
    every = [cond.Condition(type=t, status="True", reason="R", last_transition_time=T0)
             for t in ("IsolationVerified", "Ready", "DeletionPrevented", "Asleep", "QueueReady")]
    assert [c.type for c in cond.owned(every, "pipeline")] == ["Ready", "QueueReady", "Asleep"]
    assert [c.type for c in cond.owned(every, "attestation")] == ["IsolationVerified"]
    assert [c.type for c in cond.owned(every, "deletion")] == ["DeletionPrevented"]
    assert cond.owned(every, "usage") == []


def test_no_condition_type_has_two_writers():
    owners = [t for types in cond.OWNED_BY.values() for t in types]
    assert len(owners) == len(set(owners))


@pytest.mark.parametrize("text, expected", [
    ("24h", timedelta(hours=24)), ("90m", timedelta(minutes=90)), ("1h30m", timedelta(minutes=90)),
])
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "1d", "10", "h"])
def test_parse_duration_names_the_field(text):
    with pytest.raises(ValueError, match="spec.kubeconfig.tokenLifetime"):
        parse_duration(text)


def test_stages_by_kind():
    assert stage_of("Namespace") == "NamespaceReady"
    assert stage_of("LimitRange") == "QuotaReady"
    assert stage_of("ClusterRoleBinding") == "RBACReady"
    assert stage_of("Queue") == "QueueReady"
    assert stage_of("ConfigMap") == "RBACReady"  # the owners' wake request
    assert stage_of("SomethingElse") == "SharingReady"


TENANT = {"metadata": {"name": "a", "uid": "u1"}}


def test_adopt_sets_labels_and_owner_on_the_tenants_objects():
    adopted = adopt({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "q", "namespace": "tenant-a"}}, TENANT, "tenant-a")
    assert adopted["metadata"]["labels"]["gputenant.io/tenant"] == "a"
    assert adopted["metadata"]["labels"]["gputenant.io/component"] == "resourcequota"
    assert adopted["metadata"]["ownerReferences"] == [{
        "apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "name": "a", "uid": "u1",
        "controller": True, "blockOwnerDeletion": True}]


def test_adopt_leaves_shared_objects_in_other_namespaces_alone():
    shared = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "gpu-operator"}}
    assert adopt(shared, TENANT, "tenant-a") is shared


def _decision(possible: bool, reason: str = "QuotaAbovePoolCapacity"):
    from gputenant.api.v1alpha1 import Trust
    from gputenant.policy.decision import Decision
    return Decision(trust=Trust.TRUSTED, possible=possible, reason=reason, message="ask for 8 GPUs or fewer")


def test_a_stage_with_nothing_rendered_is_never_true():
    reason, message = not_applied("NetworkReady", _decision(False))
    assert reason == "QuotaAbovePoolCapacity" and "ask for 8 GPUs or fewer" in message
    assert not_applied("NetworkReady", _decision(True, "ChosenFromTrust"))[0] == "NotApplied"


def _secret(expires_at: str | None, rotation: str = "", server: str = "https://vc") -> dict:
    annotations = {"gputenant.io/rotation": rotation, "gputenant.io/server": server}
    if expires_at:
        annotations["gputenant.io/expires-at"] = expires_at
    return {"metadata": {"annotations": annotations}, "data": {"config": "eA=="}}


@pytest.mark.parametrize("secret, rotation, server, now, reason", [
    (None, "", "https://vc", "2026-01-01T00:00:00Z", "missing"),
    (_secret("2026-01-01T00:10:00Z"), "", "https://vc", "2026-01-01T00:07:59Z", None),
    (_secret("2026-01-01T00:10:00Z"), "", "https://vc", "2026-01-01T00:08:00Z", "due"),   # 80% of 10m
    (_secret("2026-01-01T00:10:00Z"), "now", "https://vc", "2026-01-01T00:01:00Z", "requested"),
    (_secret("2026-01-01T00:10:00Z"), "", "https://other", "2026-01-01T00:01:00Z", "server changed"),
    (_secret(None), "", "https://vc", "2026-01-01T00:01:00Z", "due"),
    (_secret("yesterday"), "", "https://vc", "2026-01-01T00:01:00Z", "due"),
])
def test_issue_reason_follows_kubeconfigs_needs_rotation(secret, rotation, server, now, reason):
    assert issue_reason(secret, timedelta(minutes=10), parse_timestamp(now), rotation, server) == reason


def test_a_new_revoke_request_revokes_before_anything_else():
    fresh = _secret("2026-01-01T00:10:00Z")
    now = parse_timestamp("2026-01-01T00:01:00Z")
    assert issue_reason(fresh, timedelta(minutes=10), now, "", "https://vc", "incident-42") == "revoked"
    fresh["metadata"]["annotations"]["gputenant.io/revocation"] = "incident-42"
    assert issue_reason(fresh, timedelta(minutes=10), now, "", "https://vc", "incident-42") is None


def _tenant(parts: dict[str, tuple[str, str] | None]) -> list:
    """Conditions with `parts` (type -> (status, reason), None: not set yet), the rest True, and
    Ready summarised."""
    conditions: list = []
    for part in cond.PART_CONDITIONS:
        if (status_reason := parts.get(part, ("True", "Applied"))) is None:
            continue
        status, reason = status_reason
        conditions = cond.set_condition(conditions, part, status, reason, f"{part} says {reason}", 1, T0)
    return cond.set_condition(conditions, "Ready", *cond.summarise_ready(conditions), 1, T0)


def test_an_onboarding_that_goes_well_posts_one_event_ready_true():
    starting = _tenant({"VClusterReady": ("False", "ControlPlaneStarting"), "KubeconfigReady": None})
    assert cond.transition_events([], starting) == []  # a new tenant's first wait
    up = _tenant({"KubeconfigReady": ("False", "WaitingForControlPlane")})
    assert cond.transition_events(starting, up) == []  # one wait after another
    # the pod is ready, and its API answers at the node port a moment later (kube-proxy's rules)
    silent = _tenant({"VClusterReady": ("False", "ControlPlaneNotAnswering"), "KubeconfigReady": None})
    assert cond.transition_events(starting, silent) == cond.transition_events(silent, up) == []
    ready = _tenant({})
    assert cond.transition_events(up, ready) == [("Normal", "TenantReady", "Ready=True: all parts of the tenant are in place")]
    assert cond.transition_events(ready, ready) == []
    assert cond.transition_events([], ready) == [("Normal", "TenantReady", "Ready=True: all parts of the tenant are in place")]


def test_ready_turning_from_true_to_a_wait_is_a_normal_event():
    ready, restarting = _tenant({}), _tenant({"VClusterReady": ("False", "ControlPlaneStarting")})
    assert cond.transition_events(ready, restarting) == [
        ("Normal", "ControlPlaneStarting", "Ready=False: VClusterReady: VClusterReady says ControlPlaneStarting")]


def test_a_failing_part_gets_one_warning_and_ready_no_second_event():
    ready = _tenant({})
    failed = _tenant({"VClusterReady": ("False", "HelmAdmissionDenied")})
    assert cond.transition_events(ready, failed) == [
        ("Warning", "HelmAdmissionDenied", "VClusterReady=False: VClusterReady says HelmAdmissionDenied")]


def test_ready_failing_without_a_failing_part_is_a_warning_and_a_wait_is_normal():
    invalid = [cond.Condition(type="Ready", status="False", reason="InvalidSpec", message="spec.gpu.limit: ...",
                              last_transition_time=T0)]
    assert cond.transition_events([], invalid) == [("Warning", "InvalidSpec", "Ready=False: spec.gpu.limit: ...")]
    asleep = _tenant({"VClusterReady": ("False", "Asleep")})
    assert [kind for kind, _, _ in cond.transition_events(_tenant({}), asleep)] == ["Normal"]
