"""The tenant's status as the typed `GpuTenantStatus`: carried over from the last pass, filled in by
the steps, written only when it differs from what the API server holds."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from gputenant.api.v1alpha1 import Condition, GpuTenantStatus

log = logging.getLogger(__name__)

CARRIED = ("namespace", "sharing", "granted", "vcluster", "kubeconfigs", "usage", "wake")
"""Parts of the last status a pass keeps until a step sets them again (a failed step leaves the
parts after it as they were)."""
MAX_MESSAGE = 32768
"""metav1.Condition's limit on a message (a Helm error can be longer)."""


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


def status_body(status: GpuTenantStatus, conditions: list[dict], generation: int | None) -> dict:
    """The status subresource's body: `status` with the pass's conditions and observedGeneration."""
    typed = status.model_copy(update={
        "observed_generation": generation,
        "conditions": [Condition.model_validate({**condition, "message": condition["message"][:MAX_MESSAGE]})
                       for condition in conditions]})
    return typed.model_dump(mode="json", by_alias=True, exclude_none=True)


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
