"""Does the live object already hold what we would apply? Pure, so "no write when nothing changed"
is decided without the API server and tested fast.

Server-side apply makes the live object a superset of what we send (defaults, other managers'
fields, status), so the test is "desired ⊆ live", with Kubernetes quantities compared by value
("1Gi" == "1024Mi", 2 == "2") and Secret ``stringData`` compared as the ``data`` it becomes.
"""

from __future__ import annotations

import base64
from typing import Any

from gputenant.quantities import parse_quantity


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field set in `desired` has the same value in `live`."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return all(_empty(value) for value in desired.values()) and live is None
        return all(
            _empty(value) and _empty(live.get(key)) or (key in live and is_subset(value, live[key]))
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        if _empty(desired):
            return _empty(live)
        return (isinstance(live, list) and len(live) == len(desired)
                and all(is_subset(d, l) for d, l in zip(desired, live, strict=True)))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    if desired == live:
        return True
    desired_quantity, live_quantity = parse_quantity(desired), parse_quantity(live)
    return desired_quantity is not None and desired_quantity == live_quantity


def normalise_for_apply(obj: dict) -> dict:
    """The form the API server stores: Secret ``stringData`` becomes base64 ``data`` (the server
    never returns stringData, so comparing it would always look changed)."""
    if obj.get("kind") != "Secret" or not obj.get("stringData"):
        return obj
    normalised = {key: value for key, value in obj.items() if key != "stringData"}
    data = dict(obj.get("data") or {})
    for key, value in obj["stringData"].items():
        data[key] = base64.b64encode(value.encode()).decode()
    normalised["data"] = data
    return normalised


def holds(desired: dict, live: dict | None) -> bool:
    """Whether applying `desired` would change nothing in `live` (None: the object is missing)."""
    if live is None:
        return False
    if live.get("metadata", {}).get("deletionTimestamp"):
        return False
    return is_subset(normalise_for_apply(desired), live)
