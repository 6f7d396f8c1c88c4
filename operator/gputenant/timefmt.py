"""Timestamps and durations as the Kubernetes API writes them: the one implementation.

Conditions, Events, token expiry annotations and certificate rotation all write RFC 3339 in UTC
with second precision (``2026-01-02T03:04:05Z``, what ``metav1.Time`` serialises); durations in
the API are whole ``h``/``m``/``s`` units (``24h``, ``1h30m``), as the CRD's pattern admits.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"
DURATION_PATTERN = r"^([0-9]+(h|m|s))+$"
"""The CRD's pattern for durations (CEL ``matches`` and ``duration()`` agree on it)."""
_UNITS = {"h": "hours", "m": "minutes", "s": "seconds"}


def rfc3339(moment: datetime) -> str:
    """`moment` in UTC, second precision, ``Z`` suffix."""
    return moment.astimezone(UTC).strftime(RFC3339)


def rfc3339_micro(moment: datetime) -> str:
    """`moment` in UTC with six fractional digits, as ``metav1.MicroTime`` (a Lease's times) must be."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp (``Z`` or a numeric offset, fractions allowed) as an aware datetime,
    or None when absent or unreadable."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_duration(text: str) -> timedelta | None:
    """``1h30m`` -> timedelta, or None if `text` is not a duration in whole h/m/s units."""
    text = text.strip()
    if not re.match(DURATION_PATTERN, text):
        return None
    return sum((timedelta(**{_UNITS[unit]: int(amount)}) for amount, unit in re.findall(r"([0-9]+)([hms])", text)),
               timedelta())
