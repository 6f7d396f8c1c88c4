"""The host namespace's ResourceQuota and LimitRange."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.steps.objects import apply_rendered

CONDITION = reasons.QUOTA_READY
KINDS = frozenset({"ResourceQuota", "LimitRange"})


async def ensure(run: Pass) -> bool:
    return await apply_rendered(run, CONDITION)
