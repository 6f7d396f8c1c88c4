"""A tenant's usage as its status carries it: small (a capped list of idle GPUs, no per-pod figures)
and rewritten only when it says something new, so status does not churn with every read."""

from __future__ import annotations

from datetime import datetime, timedelta

from gputenant.api.status import MAX_LISTED_GPUS, UsageGpuStatus, UsageStatus
from gputenant.config.models import Accounting
from gputenant.timefmt import parse_rfc3339, rfc3339
from gputenant.usage.model import TenantUsage

REFRESH_FIGURES_AFTER = timedelta(minutes=5)
"""GPU-hours drift with every read of a sliding window; they alone are rewritten at most this often."""
HOURS_DECIMALS = 2


def usage_status(usage: TenantUsage, window: str, now: datetime, previous: UsageStatus | None,
                 accounting: Accounting | None = None) -> UsageStatus:
    """The status summary of `usage`; ``allIdleSince`` carries over from `previous` while every held
    GPU stays idle; the cost of its hours by share when `accounting` is given."""
    all_idle = usage.gpus_held > 0 and len(usage.idle) == usage.gpus_held
    since = None
    if all_idle:
        since = previous.all_idle_since if previous and previous.all_idle_since else rfc3339(now)
    by_share = sum(usage.share_hours.values()) if usage.share_hours else None
    cost = sum(hours * accounting.price_per_gpu_hour.get(pool, 0.0) for pool, hours in usage.share_hours.items()) \
        if accounting is not None and usage.share_hours else None
    return UsageStatus(
        window=window,
        gpu_hours_by_share=None if by_share is None else round(by_share, HOURS_DECIMALS),
        cost=None if cost is None else round(cost, 2),
        cost_currency=accounting.currency if cost is not None and accounting is not None else None,
        gpus_held=usage.gpus_held,
        gpu_hours_held=round(usage.held_gpu_hours, HOURS_DECIMALS),
        gpu_hours_used=round(usage.used_gpu_hours, HOURS_DECIMALS),
        idle_gpu_count=len(usage.idle),
        idle_gpus=[UsageGpuStatus(pod=sample.pod, gpu=sample.gpu) for sample in usage.idle[:MAX_LISTED_GPUS]],
        busy_not_working=bool(usage.busy_not_working),
        all_idle_since=since,
        observed_at=rfc3339(now),
    )


def _verdicts(status: UsageStatus) -> tuple:
    return (status.window, status.gpus_held, status.idle_gpu_count, status.idle_gpus, status.busy_not_working,
            status.all_idle_since, status.gpu_hours_by_share is None, status.cost_currency)


def _figures(status: UsageStatus) -> tuple:
    return (status.gpu_hours_held, status.gpu_hours_used, status.gpu_hours_by_share, status.cost)


def worth_writing(previous: UsageStatus | None, new: UsageStatus, now: datetime) -> bool:
    """Write when what the summary says changed (GPUs held, idle, busy-not-working, idle since, hours
    by share appearing or going), or when only the GPU-hours or the cost moved and the written ones
    are older than REFRESH_FIGURES_AFTER."""
    if previous is None or _verdicts(previous) != _verdicts(new):
        return True
    if _figures(previous) == _figures(new):
        return False
    written = parse_rfc3339(previous.observed_at)
    return written is None or now - written >= REFRESH_FIGURES_AFTER
