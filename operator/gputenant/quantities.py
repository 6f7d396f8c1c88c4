"""Kubernetes resource quantities as exact numbers: the one parser every layer uses.

The API's CEL twins, the renderer's KAI units, the applier's "desired holds in live" comparison
and the admission guard all read quantities ("500m", "64Gi", "1e3", 2); one implementation keeps
them agreeing on every spelling the API server accepts.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message names the field and an example."""


def parse_quantity(value: Any) -> Decimal | None:
    """The value of a Kubernetes quantity in base units (cores, bytes, devices), or None if
    `value` is not one. Numbers are taken as written (YAML gives ``2`` for ``"2"``)."""
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
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        return None


def require_quantity(value: Any, field: str) -> Decimal:
    """`parse_quantity`, raising `QuantityError` naming `field` when `value` is not a quantity."""
    parsed = parse_quantity(value)
    if parsed is None:
        raise QuantityError(f"{field}: {value!r} is not a Kubernetes quantity (e.g. 500m, 16, 64Gi)")
    return parsed
