"""metav1.Condition bookkeeping: read, set, summarise Ready and own. Pure functions over the typed
`Condition` (api.status), so a condition's status is `True`/`False`/`Unknown` from the API server's
JSON to the status write, never a bool turned into text and back.

``lastTransitionTime`` moves only when a condition's status changes, so re-running the pipeline
on an unchanged tenant produces an identical status (and therefore no status write).

Each status writer owns its condition types (`OWNED_BY`): it applies only those, under its own field
manager; `conditions` is a list-map keyed by `type` in the CRD, so the API server merges the
writers' conditions instead of one writer's list replacing another's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from gputenant.api.conditions import (
    ASLEEP,
    DELETION_PREVENTED,
    ISOLATION_VERIFIED,
    PART_CONDITIONS,
    PROGRESSING,
    READY,
    TENANT_READY,
    WAITS,
)
from gputenant.api.status import ATTESTATION, DELETION, PIPELINE, USAGE, Condition, ConditionStatus

log = logging.getLogger(__name__)

__all__ = ["DELETION_PREVENTED", "OWNED_BY", "PART_CONDITIONS", "READY", "Condition", "ConditionStatus",
           "as_status", "find", "ordered", "owned", "parse", "remove_condition", "set_condition", "status_of",
           "summarise_ready", "transition_events"]

MAX_MESSAGE = 32768
"""metav1.Condition's limit on a message (a Helm error can be longer)."""

OWNED_BY: dict[str, frozenset[str]] = {
    PIPELINE: frozenset((READY, *PART_CONDITIONS, ASLEEP)),
    ATTESTATION: frozenset((ISOLATION_VERIFIED,)),
    DELETION: frozenset((DELETION_PREVENTED,)),
    USAGE: frozenset(),
}
"""The condition types each status writer sets; no type has two writers."""


def status_of(ok: bool | None) -> ConditionStatus:
    """A check's outcome as a condition status: True, False, or Unknown (None: not decided yet)."""
    return {True: ConditionStatus.TRUE, False: ConditionStatus.FALSE, None: ConditionStatus.UNKNOWN}[ok]


def parse(raw: Iterable[Any]) -> list[Condition]:
    """Conditions as the API server holds them, typed; one that does not validate (written by hand
    or by an older operator) is dropped, and its writer sets it afresh."""
    typed = []
    for item in raw or ():
        try:
            typed.append(Condition.model_validate(item))
        except ValidationError:
            log.info("condition %r does not validate; it will be written afresh", (item or {}).get("type"))
    return typed


def as_status(conditions: Iterable[Condition]) -> list[dict]:
    """The conditions as the status subresource takes them."""
    return [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions]


def find(conditions: Iterable[Condition], condition_type: str) -> Condition | None:
    return next((c for c in conditions if c.type == condition_type), None)


def set_condition(conditions: list[Condition], condition_type: str, status: ConditionStatus | str, reason: str,
                  message: str, generation: int | None, now: str) -> list[Condition]:
    """A copy of `conditions` with one condition set; keeps lastTransitionTime unless the status
    changes."""
    status = ConditionStatus(status)
    previous = find(conditions, condition_type)
    transition = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(type=condition_type, status=status, reason=reason, message=message[:MAX_MESSAGE],
                        last_transition_time=transition, observed_generation=generation)
    if previous is None:
        return [*conditions, updated]
    return [updated if c.type == condition_type else c for c in conditions]


def remove_condition(conditions: list[Condition], condition_type: str) -> list[Condition]:
    return [c for c in conditions if c.type != condition_type]


def owned(conditions: Iterable[Condition], writer: str) -> list[Condition]:
    """The conditions `writer` sets, in display order: what it applies, and what it compares with the
    live status to skip a write that would change nothing."""
    return ordered(c for c in conditions if c.type in OWNED_BY[writer])


def summarise_ready(conditions: list[Condition]) -> tuple[ConditionStatus, str, str]:
    """Ready's (status, reason, message): True when every part is True, else the first part that
    is False (its reason), else Unknown while parts are still pending."""
    parts = [find(conditions, t) for t in PART_CONDITIONS]
    failed = next((c for c in parts if c and c.status == ConditionStatus.FALSE), None)
    if failed:
        return ConditionStatus.FALSE, failed.reason, f"{failed.type}: {failed.message}"
    pending = next((t for t, c in zip(PART_CONDITIONS, parts, strict=True)
                    if not c or c.status != ConditionStatus.TRUE), None)
    if pending:
        return ConditionStatus.UNKNOWN, PROGRESSING, f"waiting for {pending}"
    return ConditionStatus.TRUE, TENANT_READY, "all parts of the tenant are in place"


def ordered(conditions: Iterable[Condition]) -> list[Condition]:
    """Ready first, then the parts in pipeline order, then anything else."""
    order = {t: i for i, t in enumerate((READY, *PART_CONDITIONS))}
    return sorted(conditions, key=lambda c: order.get(c.type, len(order)))


def transition_events(before: list[Condition], after: list[Condition]) -> list[tuple[str, str, str]]:
    """The Events (type, reason, message) a pass posts for what changed: one Warning per part that
    turned False for a failure (not a wait, WAITS); one Normal when Ready's status flips (to True,
    or from True to a wait such as Asleep); and a Warning when Ready fails without a failing part to
    name it (an invalid spec). Parts turning True, a new tenant's first wait and one wait following
    another are told by status alone, so an onboarding that goes well posts one Event (Ready=True)."""
    def changed(condition: Condition) -> bool:
        old = find(before, condition.type)
        return old is None or (old.status, old.reason) != (condition.status, condition.reason)

    events = [("Warning", c.reason, f"{c.type}=False: {c.message}") for c in after
              if c.type in PART_CONDITIONS and changed(c) and c.status is ConditionStatus.FALSE
              and c.reason not in WAITS]
    ready, old_ready = find(after, READY), find(before, READY)
    if ready is None or not changed(ready):
        return events
    failed = ready.status is not ConditionStatus.TRUE and ready.reason not in WAITS
    flipped = ready.status != (old_ready.status if old_ready is not None else ConditionStatus.FALSE)
    if (failed and not events) or (not failed and flipped):
        events.append(("Warning" if failed else "Normal", ready.reason, f"Ready={ready.status.value}: {ready.message}"))
    return events
