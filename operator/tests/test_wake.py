"""Wake on request (reconcile/wake.py): an owner's request wins over spec.sleep.asleep until the GPUs
have idled one window after waking; a handled request never wakes twice; spec is never touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputenant.api.status import UsageStatus, WakeStatus
from gputenant.api.v1alpha1 import GpuTenant, SleepSpec
from gputenant.reconcile.wake import DEFAULT_WAKE, as_awake, next_wake, woken
from gputenant.timefmt import rfc3339

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
ASLEEP = SleepSpec(asleep=True)
ASLEEP_IDLE_1H = SleepSpec.model_validate({"asleep": True, "idle": {"after": "1h"}})


def usage(idle_since: datetime | None, held: int = 1) -> UsageStatus:
    return UsageStatus(window="1h", gpus_held=held, all_idle_since=rfc3339(idle_since) if idle_since else None,
                       observed_at=rfc3339(NOW))


def test_a_new_request_wakes_a_sleeping_tenant_for_at_least_one_window():
    wake = next_wake(ASLEEP_IDLE_1H, "monday", None, None, NOW)
    assert wake == WakeStatus(request="monday", woken_at=rfc3339(NOW), until=rfc3339(NOW + timedelta(hours=1)))
    assert woken(wake)
    assert next_wake(ASLEEP, "monday", None, None, NOW).until == rfc3339(NOW + DEFAULT_WAKE)


def test_the_wake_holds_until_its_window_is_over():
    wake = next_wake(ASLEEP_IDLE_1H, "monday", None, None, NOW)
    assert next_wake(ASLEEP_IDLE_1H, "monday", wake, usage(NOW), NOW + timedelta(minutes=59)) == wake


def test_it_ends_when_the_gpus_idled_a_window_and_the_same_request_does_not_wake_again():
    wake = next_wake(ASLEEP_IDLE_1H, "monday", None, None, NOW)
    later = NOW + timedelta(hours=2)
    ended = next_wake(ASLEEP_IDLE_1H, "monday", wake, usage(NOW + timedelta(minutes=30)), later)
    assert not woken(ended) and ended.request == "monday"
    assert next_wake(ASLEEP_IDLE_1H, "monday", ended, None, later) == ended


def test_working_gpus_keep_it_awake_past_the_window():
    wake = next_wake(ASLEEP_IDLE_1H, "monday", None, None, NOW)
    due = NOW + timedelta(hours=1)
    extended = next_wake(ASLEEP_IDLE_1H, "monday", wake, usage(None), due)
    assert woken(extended) and extended.until == rfc3339(due + timedelta(hours=1))
    idle_since = due + timedelta(minutes=20)
    later = next_wake(ASLEEP_IDLE_1H, "monday", extended, usage(idle_since), due + timedelta(hours=1))
    assert later.until == rfc3339(idle_since + timedelta(hours=1)), "idle, but not yet for a whole window"


def test_a_tenant_holding_no_gpu_sleeps_again_when_the_window_is_over():
    wake = next_wake(ASLEEP_IDLE_1H, "monday", None, None, NOW)
    assert not woken(next_wake(ASLEEP_IDLE_1H, "monday", wake, usage(None, held=0), NOW + timedelta(hours=1)))


def test_a_request_to_an_awake_tenant_is_only_remembered():
    awake = SleepSpec(asleep=False)
    remembered = next_wake(awake, "monday", None, None, NOW)
    assert remembered == WakeStatus(request="monday")
    assert next_wake(ASLEEP, "monday", remembered, None, NOW) == remembered, "a later sleep is not undone by it"
    assert woken(next_wake(ASLEEP, "tuesday", remembered, None, NOW))


def test_spec_waking_the_tenant_ends_the_wake_and_no_request_changes_nothing():
    wake = next_wake(ASLEEP, "monday", None, None, NOW)
    assert next_wake(SleepSpec(asleep=False), "monday", wake, None, NOW) == WakeStatus(request="monday")
    assert next_wake(ASLEEP, "", None, None, NOW) is None


def test_the_pass_runs_an_awake_copy_and_leaves_the_spec_alone():
    tenant = GpuTenant.model_validate({"metadata": {"name": "t"}, "spec": {
        "trust": "Trusted", "owners": [{"kind": "User", "name": "o"}], "sleep": {"asleep": True}}})
    assert as_awake(tenant).spec.sleep.asleep is False
    assert tenant.spec.sleep.asleep is True
