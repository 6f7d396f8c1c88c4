"""Validation that holds in both places a GpuTenant is checked.

The API server checks the CRD's schema and CEL rules; the operator and ``gputenant render`` check
the pydantic models offline. Each rule is declared once, next to its model, with its CEL text, its
message and a Python twin, so both places reject the same input with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from gputenant.quantities import parse_quantity
from gputenant.timefmt import parse_duration

CEL_KEY = "x-kubernetes-validations"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""RFC 1123 label: namespaces, queue and pool names."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""RFC 1123 subdomain: service accounts, storage classes."""


@dataclass(frozen=True)
class Rule:
    """A cross-field rule of one model: CEL for the API server, ``holds`` for pydantic."""

    rule: str
    message: str
    holds: Callable[[Any], bool]
    """The Python twin of ``rule``; gets the validated model instance."""
    field_path: str | None = None
    """Field the error is reported on, relative to the model, e.g. ``.limit``."""
    reason: str | None = None
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


def _exact_quantity(text: str) -> Decimal | None:
    """A quantity as CEL's ``quantity()`` reads it: the shared parser, minus the whitespace it forgives."""
    return parse_quantity(text) if text == text.strip() else None


def is_positive_quantity(text: str) -> bool:
    value = _exact_quantity(text)
    return value is not None and value > 0


def quantity_at_most(smaller: str, larger: str) -> bool:
    """``smaller <= larger``; True when either is no quantity (that is reported on the field itself)."""
    low, high = _exact_quantity(smaller), _exact_quantity(larger)
    return low is None or high is None or low <= high


def duration_between(text: str, shortest: str, longest: str) -> bool:
    """``text`` is a duration as CEL's ``matches`` and ``duration()`` read it, within the bounds."""
    value = parse_duration(text) if text == text.strip() else None
    low, high = parse_duration(shortest), parse_duration(longest)
    return value is not None and low is not None and high is not None and low <= value <= high


def is_https_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname)
