"""When a kubeconfig is re-issued: at 80% of its token's lifetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gputenant.kubeconfigs import needs_rotation

ISSUED = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


@pytest.mark.parametrize("elapsed, rotate", [
    (timedelta(0), False),
    (timedelta(hours=19, minutes=11), False),   # just under 80% of 24h (19h12m)
    (timedelta(hours=19, minutes=12), True),    # exactly 80%
    (timedelta(hours=23), True),
    (timedelta(hours=30), True),                # already expired
])
def test_rotates_at_eighty_percent(elapsed, rotate):
    assert needs_rotation(ISSUED + DAY, ISSUED + elapsed, DAY) is rotate


def test_short_lifetimes_scale_too():
    ten_minutes = timedelta(minutes=10)
    assert not needs_rotation(ISSUED + ten_minutes, ISSUED + timedelta(minutes=7), ten_minutes)
    assert needs_rotation(ISSUED + ten_minutes, ISSUED + timedelta(minutes=8), ten_minutes)


def test_unknown_expiry_rotates():
    assert needs_rotation(None, ISSUED, DAY)
