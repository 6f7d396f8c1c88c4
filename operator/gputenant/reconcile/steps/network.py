"""The host namespace's NetworkPolicies."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.steps.objects import apply_rendered

CONDITION = reasons.NETWORK_READY
KINDS = frozenset({"NetworkPolicy"})


async def ensure(run: Pass) -> bool:
    return await apply_rendered(run, CONDITION)
