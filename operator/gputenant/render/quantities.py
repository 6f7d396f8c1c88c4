"""Kubernetes resource quantities as exact numbers, for the KAI Queue's plain-number units.

KAI counts CPU in millicores and memory in megabytes (10^6 bytes), while tenants write Kubernetes
quantities ("16", "500m", "64Gi"); converting here keeps the Queue and the ResourceQuota in step.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from gputenant.render.errors import RenderError

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: str | int | float, field: str) -> Decimal:
    """The quantity's value in base units (cores, bytes). `field` names it in the error."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise RenderError(f"{field}: {text!r} is not a Kubernetes quantity (e.g. 500m, 16, 64Gi)")
    number, suffix = match.groups()
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        raise RenderError(f"{field}: {text!r} is not a Kubernetes quantity") from None


def _whole_or_fraction(amount: Decimal) -> int | float:
    """An int when the amount is whole, so YAML shows 16000 rather than 16000.0."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def cpu_millicores(value: str, field: str) -> int | float:
    return _whole_or_fraction(parse_quantity(value, field) * 1000)


def memory_megabytes(value: str, field: str) -> int | float:
    """KAI's memory unit is the decimal megabyte: 64Gi = 68719.476736 MB."""
    return _whole_or_fraction(parse_quantity(value, field) / Decimal(10**6))
