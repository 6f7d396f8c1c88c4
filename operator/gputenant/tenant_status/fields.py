"""The tenant's status as the typed `GpuTenantStatus`: carried over from the last pass, filled in by
the steps, written only when it differs from what the API server holds."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from gputenant.api.hub import Condition, GpuTenantStatus
from gputenant.api.status import PIPELINE, USAGE
from gputenant.tenant_status import conditions as cond

log = logging.getLogger(__name__)

CARRIED = ("namespace", "sharing", "granted", "vcluster", "kubeconfigs", "usage", "wake", "argocd")
"""Parts of the last status a pass keeps until a step sets them again (a failed step leaves the
parts after it as they were)."""
NOT_WRITTEN = frozenset({"usage"})
"""Parts a pass reads but never writes: the usage loop owns them (its own field manager), so a pass
holding an older read cannot write it back over a newer one."""


def carried_status(old: dict) -> GpuTenantStatus:
    """The parts of the last written status a pass starts from; one that no longer validates (the
    operator wrote it in an older shape) is dropped and written afresh."""
    kept: dict[str, Any] = {}
    for key in CARRIED:
        if key not in old:
            continue
        try:
            GpuTenantStatus.model_validate({key: old[key]})
        except ValidationError:
            log.info("status.%s of the last pass does not validate; writing it afresh", key)
            continue
        kept[key] = old[key]
    return GpuTenantStatus.model_validate(kept)


def whole_status(status: GpuTenantStatus, conditions: list[Condition], generation: int | None) -> dict:
    """The status as the pass sees it: its own parts and what it read of the other writers' (the
    tenant's view shows usage and IsolationVerified too)."""
    typed = status.model_copy(update={"observed_generation": generation, "conditions": cond.ordered(conditions)})
    return typed.model_dump(mode="json", by_alias=True, exclude_none=True)


def status_body(status: GpuTenantStatus, conditions: list[Condition], generation: int | None) -> dict:
    """What the pipeline applies to the status subresource: `status` with the pass's own conditions
    and observedGeneration, without the parts other writers own."""
    body = whole_status(status, cond.owned(conditions, PIPELINE), generation)
    return {key: value for key, value in body.items() if key not in NOT_WRITTEN}


def pipeline_part(status: dict) -> dict:
    """The part of a live status the pipeline writes, to compare with `status_body`: a write is
    skipped when the pipeline's own fields and conditions say the same, whatever other writers hold."""
    mine = {key: value for key, value in status.items() if key != "conditions" and key not in NOT_WRITTEN}
    return {**mine, "conditions": cond.as_status(cond.owned(cond.parse(status.get("conditions") or []), PIPELINE))}


def comparable(status: dict) -> str:
    """`status` as text that is equal exactly when two statuses say the same: None is absent, and
    100.0 is 100 (the typed model writes floats, the API server gives whole numbers back as ints)."""
    return json.dumps(_normal(status), sort_keys=True, default=str)


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _normal(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_normal(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def has_merge_patched_status(entries: list[dict], user_agent: str) -> bool:
    """Whether `managedFields` still hold a record of status merge patches (`split_merge_patched_status`)."""
    return any(entry.get("manager") == user_agent and entry.get("operation") == "Update"
               and entry.get("subresource") == "status" for entry in entries)


def split_merge_patched_status(entries: list[dict], user_agent: str, field_manager: str) -> list[dict] | None:
    """`managedFields` with the record of status merge patches (how releases before server-side apply
    of status wrote it, under the client's user agent) handed to the writers that now own each field:
    `status.usage` to the usage writer, each condition to its type's writer, the rest to the
    pipeline. A field left on the old record would outlive the writer that stops applying it (an
    Update manager's fields are never removed by an apply). None: no such record."""
    old = [entry for entry in entries if entry.get("manager") == user_agent and entry.get("operation") == "Update"
           and entry.get("subresource") == "status"]
    if not old:
        return None
    kept = [entry for entry in entries if not any(entry is o for o in old)]
    for entry in old:
        for writer, fields in _fields_by_writer(entry.get("fieldsV1") or {}).items():
            manager = f"{field_manager}-{writer}"
            mine = next((e for e in kept if e.get("manager") == manager and e.get("operation") == "Apply"
                         and e.get("subresource") == "status"), None)
            if mine is None:
                kept.append({"manager": manager, "operation": "Apply", "apiVersion": entry.get("apiVersion"),
                             "time": entry.get("time"), "fieldsType": "FieldsV1", "fieldsV1": fields,
                             "subresource": "status"})
            else:
                mine["fieldsV1"] = _merged(mine.get("fieldsV1") or {}, fields)
    return kept


def _fields_by_writer(fields: dict) -> dict[str, dict]:
    status = dict(fields.get("f:status") or {})
    parts: dict[str, dict] = {}
    if "f:usage" in status:
        parts[USAGE] = {"f:status": {"f:usage": status.pop("f:usage")}}
    conditions = dict(status.get("f:conditions") or {})
    for key in list(conditions):
        writer = _writer_of_condition(key)
        if writer != PIPELINE:
            item = conditions.pop(key)
            parts[writer] = _merged(parts.get(writer, {}), {"f:status": {"f:conditions": {key: item}}})
    if "f:conditions" in status:
        status["f:conditions"] = conditions
    parts[PIPELINE] = {"f:status": status}
    return parts


def _writer_of_condition(key: str) -> str:
    """The writer of the condition a list-map key (``k:{"type":"Ready"}``) names; the pipeline for
    a type no writer claims (the old pipeline wrote it)."""
    try:
        condition_type = json.loads(key.removeprefix("k:")).get("type") if key.startswith("k:") else None
    except ValueError:
        condition_type = None
    return next((writer for writer, types in cond.OWNED_BY.items() if condition_type in types), PIPELINE)


def _merged(a: dict, b: dict) -> dict:
    return {**a, **{key: _merged(a[key], value) if isinstance(a.get(key), dict) and isinstance(value, dict) else value
                    for key, value in b.items()}}
