"""KAI Queue units from Kubernetes quantities, on the shared parser (`gputenant.quantities`).

KAI counts CPU in millicores and memory in megabytes (10^6 bytes), while tenants write Kubernetes
quantities ("16", "500m", "64Gi"); converting here keeps the Queue and the ResourceQuota in step.
"""

from __future__ import annotations

from decimal import Decimal

from gputenant.quantities import QuantityError, require_quantity
from gputenant.render.errors import RenderError


def quantity(value: str | int | float, field: str) -> Decimal:
    """The quantity's value in base units (cores, bytes); a `RenderError` naming `field` if it is none."""
    try:
        return require_quantity(value, field)
    except QuantityError as error:
        raise RenderError(str(error)) from None


def _whole_or_fraction(amount: Decimal) -> int | float:
    """An int when the amount is whole, so YAML shows 16000 rather than 16000.0."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def cpu_millicores(value: str, field: str) -> int | float:
    return _whole_or_fraction(quantity(value, field) * 1000)


def memory_megabytes(value: str, field: str) -> int | float:
    """KAI's memory unit is the decimal megabyte: 64Gi = 68719.476736 MB."""
    return _whole_or_fraction(quantity(value, field) / Decimal(10**6))
