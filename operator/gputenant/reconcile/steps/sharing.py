"""The GPU-sharing objects (device-plugin configuration, admission policy bindings): every rendered
kind no other step claims. An impossible policy decision stops the pass here, as a condition."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.steps.objects import apply_objects

CONDITION = reasons.SHARING_READY
KINDS: frozenset[str] = frozenset()
"""None of its own: the objects of every kind no other step lists."""


async def ensure(run: Pass) -> bool:
    decision = run.plan.decision
    if not decision.possible:
        run.set(CONDITION, False, decision.reason, decision.message)
        run.outcome.permanent_failure = decision.reason
        return False
    await apply_objects(run, CONDITION, run.plan.rendered.get(CONDITION) or [], reason=decision.reason,
                        message=decision.message)
    return True
