"""metav1.Condition bookkeeping: set a condition, summarise Ready. Pure functions over dicts.

``lastTransitionTime`` moves only when a condition's status changes, so re-running the pipeline
on an unchanged tenant produces an identical status (and therefore no status write).
"""

from __future__ import annotations

from gputenant.api.conditions import DELETION_PREVENTED, PART_CONDITIONS, PROGRESSING, READY, TENANT_READY

__all__ = ["DELETION_PREVENTED", "PART_CONDITIONS", "READY", "find", "ordered", "remove_condition",
           "set_condition", "summarise_ready"]


def find(conditions: list[dict], condition_type: str) -> dict | None:
    return next((c for c in conditions if c.get("type") == condition_type), None)


def set_condition(conditions: list[dict], condition_type: str, status: str, reason: str,
                  message: str, generation: int | None, now: str) -> list[dict]:
    """A copy of `conditions` with one condition set; keeps lastTransitionTime unless the status
    changes."""
    previous = find(conditions, condition_type)
    transition = previous["lastTransitionTime"] if previous and previous.get("status") == status else now
    updated = {
        "type": condition_type, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": transition, "observedGeneration": generation,
    }
    if previous is None:
        return [*conditions, updated]
    return [updated if c.get("type") == condition_type else c for c in conditions]


def remove_condition(conditions: list[dict], condition_type: str) -> list[dict]:
    return [c for c in conditions if c.get("type") != condition_type]


def summarise_ready(conditions: list[dict]) -> tuple[str, str, str]:
    """Ready's (status, reason, message): True when every part is True, else the first part that
    is False (its reason), else Unknown while parts are still pending."""
    parts = [find(conditions, t) for t in PART_CONDITIONS]
    failed = next((c for c in parts if c and c["status"] == "False"), None)
    if failed:
        return "False", failed["reason"], f"{failed['type']}: {failed['message']}"
    pending = next((t for t, c in zip(PART_CONDITIONS, parts, strict=True) if not c or c["status"] != "True"), None)
    if pending:
        return "Unknown", PROGRESSING, f"waiting for {pending}"
    return "True", TENANT_READY, "all parts of the tenant are in place"


def ordered(conditions: list[dict]) -> list[dict]:
    """Ready first, then the parts in pipeline order, then anything else."""
    order = {t: i for i, t in enumerate((READY, *PART_CONDITIONS))}
    return sorted(conditions, key=lambda c: order.get(str(c.get("type")), len(order)))
