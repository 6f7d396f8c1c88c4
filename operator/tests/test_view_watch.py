"""When a watched change of what a tenant's view shows queues a look again (view_watch._changed):
never for the first listing, never for a new tenant's first event (its own pass writes its first
view; a look again queued ahead of it would onboard it out of turn), but for a new GPU pod."""

from __future__ import annotations

from gputenant.view_watch import _changed

LISTED, ADDED, MODIFIED = {"type": None}, {"type": "ADDED"}, {"type": "MODIFIED"}


def test_the_first_listing_only_records():
    memo: dict = {}
    assert not _changed(memo, "k", ("a",), LISTED, first_sighting_counts=True)  # type: ignore[arg-type]
    assert not _changed(memo, "k", ("a",), MODIFIED, first_sighting_counts=True)  # type: ignore[arg-type]
    assert _changed(memo, "k", ("b",), MODIFIED, first_sighting_counts=True)  # type: ignore[arg-type]


def test_a_new_tenants_first_event_queues_nothing_and_its_later_changes_do():
    memo: dict = {}
    assert not _changed(memo, "status", ("{}",), ADDED, first_sighting_counts=False)  # type: ignore[arg-type]
    assert not _changed(memo, "status", ("{}",), MODIFIED, first_sighting_counts=False)  # type: ignore[arg-type]
    assert _changed(memo, "status", ('{"gpusHeld": 1}',), MODIFIED, first_sighting_counts=False)  # type: ignore[arg-type]


def test_a_new_gpu_pod_queues_a_look_and_a_pod_the_view_never_shows_does_not():
    assert _changed({}, "pod", (False, "Pending"), ADDED, first_sighting_counts=True)  # type: ignore[arg-type]
    assert not _changed({}, "pod", None, ADDED, first_sighting_counts=True)  # type: ignore[arg-type]
