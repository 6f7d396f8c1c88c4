"""Validation that holds in both places a GpuTenant is checked.

The API server checks the CRD's schema and CEL rules; the operator and ``gputenant render`` check
the pydantic models offline. Each rule is declared once, next to its model, with its CEL text, its
message and a Python twin, so both places reject the same input with the same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

CEL_KEY = "x-kubernetes-validations"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""RFC 1123 label: namespaces, queue and pool names."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""RFC 1123 subdomain: service accounts, storage classes."""
DURATION = r"^([0-9]+(h|m|s))+$"
"""Whole hours, minutes and seconds, e.g. 90m, 24h or 1h30m (a subset of Go durations)."""


@dataclass(frozen=True)
class Rule:
    """A cross-field rule of one model: CEL for the API server, ``holds`` for pydantic."""

    rule: str
    message: str
    holds: Callable[[Any], bool]
    """The Python twin of ``rule``; gets the validated model instance."""
    field_path: Optional[str] = None
    """Field the error is reported on, relative to the model, e.g. ``.limit``."""
    reason: Optional[str] = None
    """FieldValueInvalid (default), FieldValueForbidden or FieldValueRequired."""

    def cel(self) -> dict[str, str]:
        """The rule as one entry of ``x-kubernetes-validations``."""
        entry = {"rule": self.rule, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        if self.reason:
            entry["reason"] = self.reason
        return entry

    def error(self, value: Any) -> InitErrorDetails:
        location = tuple(self.field_path.lstrip(".").split(".")) if self.field_path else ()
        return InitErrorDetails(type=PydanticCustomError("rule", self.message), loc=location, input=value)


def check_rules(model: Any, rules: tuple[Rule, ...]) -> None:
    """Raise one ValidationError listing every rule ``model`` breaks, each at its own field."""
    errors = [rule.error(model) for rule in rules if not rule.holds(model)]
    if errors:
        raise ValidationError.from_exception_data(type(model).__name__, errors)


def value_rule(rule: str, message: str, holds: Callable[[Any], bool]) -> tuple[Any, AfterValidator]:
    """Annotations for a rule on a single value: ``Annotated[str, *value_rule(...)]``."""

    def check(value: Any) -> Any:
        if not holds(value):
            raise PydanticCustomError("rule", message)
        return value

    return Field(json_schema_extra={CEL_KEY: [{"rule": rule, "message": message}]}), AfterValidator(check)


def unique(key: Callable[[Any], Any], message: str) -> AfterValidator:
    """Reject lists with two items of the same key (the CRD says so with x-kubernetes-list-type)."""

    def check(items: list) -> list:
        keys = [key(item) for item in items]
        duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
        if duplicates:
            raise PydanticCustomError("rule", "{message}: {duplicates}", {"message": message, "duplicates": ", ".join(duplicates)})
        return items

    return AfterValidator(check)


_QUANTITY = re.compile(r"^([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str) -> Optional[Decimal]:
    """The value of a Kubernetes quantity (``500m``, ``4Gi``, ``1e3``), or None if it is not one."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    sign, number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        value *= Decimal(1024) ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = value.scaleb(_DECIMAL[suffix])
    elif suffix:
        value = value.scaleb(int(suffix[1:]))
    return -value if sign == "-" else value


def is_positive_quantity(text: str) -> bool:
    value = parse_quantity(text)
    return value is not None and value > 0


def quantity_at_most(smaller: str, larger: str) -> bool:
    """``smaller <= larger``; True when either is no quantity (that is reported on the field itself)."""
    low, high = parse_quantity(smaller), parse_quantity(larger)
    return low is None or high is None or low <= high


def parse_duration(text: str) -> Optional[timedelta]:
    """The value of a duration in whole h/m/s units such as ``1h30m``, or None if it is not one."""
    if not re.match(DURATION, text):
        return None
    units = {"h": "hours", "m": "minutes", "s": "seconds"}
    return sum((timedelta(**{units[unit]: int(amount)}) for amount, unit in re.findall(r"([0-9]+)(h|m|s)", text)), timedelta())


def is_https_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname)
