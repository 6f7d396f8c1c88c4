"""Does the live object already hold what we would apply? Pure, so "no write when nothing changed"
is decided without the API server and tested fast.

Server-side apply makes the live object a superset of what we send (defaults, other managers'
fields, status), so the test is "desired ⊆ live", with Kubernetes quantities compared by value
("1Gi" == "1024Mi", 2 == "2") and Secret ``stringData`` compared as the ``data`` it becomes.
"""

from __future__ import annotations

import base64
import re
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_SUFFIX = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: Any) -> Decimal | None:
    """The value of a Kubernetes quantity ("500m", "1Gi", 2, "1e3"), or None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix]
    except (InvalidOperation, KeyError):
        return None


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
