"""GPU-hours by share and their cost per tenant over a period (`gputenant usage --since`): pure.

The hours held come from the operator's own ``gputenant_tenant_gpu_shares`` series integrated over
the period (pools/shares.py counts each pod by its share), so tenants sharing one GPU are charged
their parts of it and their costs add up to the GPU's. Used hours are *apportioned*: the tenant's
held hours by share times the SM activity of the physical GPUs it held (DCGM activity is per
device, so a share's own use cannot be told from its neighbours'); they are labelled so.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from gputenant.config.models import Accounting
from gputenant.tables import align_columns

HOURS_DECIMALS = 2


@dataclass(frozen=True)
class Charge:
    tenant: str
    pool: str
    gpu_hours: float
    """GPU-hours held by share over the period."""
    used_gpu_hours: float | None
    """Apportioned: `gpu_hours` times the SM activity of the GPUs the tenant held; None without DCGM data."""
    price: float
    """Per GPU-hour on the pool (accounting.pricePerGpuHour)."""

    @property
    def cost(self) -> float:
        return self.gpu_hours * self.price


def charges(held: dict[tuple[str, str], float], use_ratio: dict[str, float], accounting: Accounting) -> list[Charge]:
    """One charge per (tenant, pool) held in the period, sorted; `use_ratio`: tenant -> its GPUs'
    used over held hours (absent: unknown)."""
    return [Charge(tenant, pool, hours, hours * use_ratio[tenant] if tenant in use_ratio else None,
                   accounting.price_per_gpu_hour.get(pool, 0.0))
            for (tenant, pool), hours in sorted(held.items())]


def _used(charge: Charge) -> str:
    return "-" if charge.used_gpu_hours is None else f"{charge.used_gpu_hours:.{HOURS_DECIMALS}f}"


def format_chargeback(period: str, rows: list[Charge], currency: str) -> str:
    """The chargeback table, a total line last."""
    header = ("TENANT", "POOL", "GPU-H-BY-SHARE", "USED-GPU-H(APPORTIONED)", f"PRICE/GPU-H({currency})",
              f"COST-{period}({currency})")
    lines = [header] + [(c.tenant, c.pool, f"{c.gpu_hours:.{HOURS_DECIMALS}f}", _used(c), f"{c.price:g}",
                         f"{c.cost:.2f}") for c in rows]
    lines.append(("TOTAL", "-", f"{sum(c.gpu_hours for c in rows):.{HOURS_DECIMALS}f}", "-", "-",
                  f"{sum(c.cost for c in rows):.2f}"))
    return align_columns(lines)


def chargeback_csv(period: str, rows: list[Charge], currency: str) -> str:
    """The same as CSV, full precision, for a spreadsheet or a billing import."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tenant", "pool", "period", "gpu_hours_by_share", "used_gpu_hours_apportioned",
                     "price_per_gpu_hour", "cost", "currency"])
    for c in rows:
        writer.writerow([c.tenant, c.pool, period, c.gpu_hours, "" if c.used_gpu_hours is None else c.used_gpu_hours,
                         c.price, c.cost, currency])
    return out.getvalue()
