"""What the reconciler remembers between passes (by uid, dropped with the tenant), and the typed
status it writes."""

from gputenant.reconcile.memory import HelmAttempt, TenantMemory
from gputenant.tenant_status import conditions as cond
from gputenant.tenant_status.fields import carried_status, comparable, pipeline_part, status_body, whole_status

ATTEMPT = HelmAttempt(generation=1, values_hash="sha256:a", retry_request="")


def test_a_permanent_helm_failure_holds_only_for_the_same_attempt():
    memory = TenantMemory()
    memory.stop_helm("t", "uid-1", ATTEMPT, "HelmFailed", "the chart refused")
    assert memory.helm_stop("uid-1", ATTEMPT).reason == "HelmFailed"
    for changed in (HelmAttempt(2, "sha256:a", ""), HelmAttempt(1, "sha256:b", ""), HelmAttempt(1, "sha256:a", "1")):
        assert memory.helm_stop("uid-1", changed) is None, changed


def test_a_tenant_recreated_under_the_same_name_inherits_nothing():
    memory = TenantMemory()
    memory.stop_helm("t", "uid-1", ATTEMPT, "HelmFailed", "the chart refused")
    assert memory.helm_stop("uid-2", ATTEMPT) is None
    memory.seen("t", "uid-2")
    assert memory.helm_stop("uid-1", ATTEMPT) is None and len(memory) == 1


def test_forget_drops_everything_about_a_deleted_tenant():
    memory = TenantMemory()
    memory.stop_helm("t", "uid-1", ATTEMPT, "HelmFailed", "the chart refused")
    memory.settle_ownership("uid-1")
    memory.forget("uid-1")
    assert memory.helm_stop("uid-1", ATTEMPT) is None and len(memory) == 0
    assert not memory.ownership_settled("uid-1")


WRITTEN = {
    "observedGeneration": 3, "namespace": "tenant-a",
    "conditions": [{"type": "Ready", "status": "True", "reason": "TenantReady", "message": "ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}],
    "sharing": {"mode": "TimeSlicing", "pool": "a100", "reason": "why"},
    "granted": {"resources": {"requests.nvidia.com/gpu": "1"}, "queue": {"name": "a", "quota": 100.0}},
    "vcluster": {"release": "a", "chartVersion": "0.36.1", "valuesHash": "sha256:x", "endpoint": "https://a"},
    "kubeconfigs": [{"role": "admin", "secretName": "a-kubeconfig-admin", "expiresAt": "2026-01-02T00:00:00Z"}],
}


def test_a_status_carried_through_the_typed_model_compares_equal_so_nothing_is_written():
    typed = carried_status(WRITTEN)
    assert comparable(status_body(typed, cond.parse(WRITTEN["conditions"]), 3)) == comparable(WRITTEN)


def test_a_carried_part_that_no_longer_validates_is_dropped_not_fatal():
    typed = carried_status({**WRITTEN, "sharing": {"mode": "Telepathy"}})
    assert typed.sharing is None and typed.namespace == "tenant-a"


def test_an_overlong_message_is_cut_to_the_metav1_condition_limit():
    long = cond.set_condition([], "Ready", "False", "HelmFailed", "x" * 40000, 1, "2026-01-01T00:00:00Z")
    assert len(status_body(carried_status({}), long, 1)["conditions"][0]["message"]) == 32768


def test_whole_numbers_read_back_as_ints_compare_equal_to_the_models_floats():
    """The API server returns queue.quota 100.0 as 100; that must not look like a change (a status
    write on every resync)."""
    read_back = {**WRITTEN, "granted": {**WRITTEN["granted"], "queue": {"name": "a", "quota": 100}}}
    assert comparable(status_body(carried_status(read_back), cond.parse(WRITTEN["conditions"]), 3)) == \
        comparable(read_back)


OTHER_WRITERS = {
    "usage": {"window": "1h", "gpusHeld": 1, "observedAt": "2026-01-01T00:00:00Z"},
    "conditions": [*WRITTEN["conditions"], {
        "type": "IsolationVerified", "status": "Unknown", "reason": "Unattested", "message": "no canary",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}],
}


def test_the_pipeline_writes_neither_usage_nor_another_writers_condition():
    """A pass starting from a status the usage and attestation writers also wrote sends back only
    its own parts (a stale copy of theirs would overwrite a newer one)."""
    live = {**WRITTEN, **OTHER_WRITERS}
    body = status_body(carried_status(live), cond.parse(live["conditions"]), 3)
    assert "usage" not in body
    assert [c["type"] for c in body["conditions"]] == ["Ready"]


def test_another_writers_fields_are_no_reason_for_a_pipeline_write():
    live = {**WRITTEN, **OTHER_WRITERS}
    body = status_body(carried_status(live), cond.parse(live["conditions"]), 3)
    assert comparable(body) == comparable(pipeline_part(live))
    changed = cond.set_condition(cond.parse(live["conditions"]), "Ready", "False", "HelmFailed", "no", 3,
                                 "2026-01-01T00:01:00Z")
    assert comparable(status_body(carried_status(live), changed, 3)) != comparable(pipeline_part(live))


def test_the_tenants_view_still_sees_what_other_writers_wrote():
    live = {**WRITTEN, **OTHER_WRITERS}
    seen = whole_status(carried_status(live), cond.parse(live["conditions"]), 3)
    assert seen["usage"]["gpusHeld"] == 1
    assert [c["type"] for c in seen["conditions"]] == ["Ready", "IsolationVerified"]


def test_a_step_counts_as_converged_only_on_the_digest_it_ended_in_place_on():
    memory = TenantMemory()
    assert not memory.converged("uid-1", "QuotaReady", "digest-a")
    memory.note_step("uid-1", "QuotaReady", "digest-a")
    assert memory.converged("uid-1", "QuotaReady", "digest-a")
    assert not memory.converged("uid-1", "QuotaReady", "digest-b")
    assert not memory.converged("uid-2", "QuotaReady", "digest-a")
    memory.note_step("uid-1", "QuotaReady", None)  # the step did not end in place
    assert not memory.converged("uid-1", "QuotaReady", "digest-a")
    memory.note_step("uid-1", "RBACReady", "digest-c")
    memory.forget("uid-1")
    assert not memory.converged("uid-1", "RBACReady", "digest-c")


def test_the_operators_access_is_confirmed_once_per_tenant_and_forgotten_with_it():
    memory = TenantMemory()
    assert not memory.access_confirmed("uid-1")
    memory.confirm_access("uid-1")
    assert memory.access_confirmed("uid-1") and not memory.access_confirmed("uid-2")
    memory.forget("uid-1")
    assert not memory.access_confirmed("uid-1")
