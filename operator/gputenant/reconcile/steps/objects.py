"""Applying the rendered objects of one step, the part every object step shares."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.policy.decision import Decision
from gputenant.reconcile.context import Pass


def not_applied(condition: str, decision: Decision) -> tuple[str, str]:
    """(reason, message) of a step the renderer gave no objects: the policy's reason when the
    decision is impossible (the step is withheld because of it), else NotApplied."""
    if not decision.possible:
        return decision.reason, f"nothing applied while the sharing policy is impossible: {decision.message}"
    return reasons.NOT_APPLIED, f"the renderer produced no objects for {condition}"


async def apply_objects(run: Pass, condition: str, objects: list[dict], *, reason: str = reasons.APPLIED,
                        message: str = "") -> None:
    """Ensure each object (a write only where the live one differs) and set the step's condition."""
    for obj in objects:
        await run.applier.ensure(obj)
    names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    run.set(condition, True, reason, message or f"in place: {names}")


async def apply_rendered(run: Pass, condition: str) -> bool:
    """The step's rendered objects, or its condition False when the renderer withheld them; the
    pass goes on either way (a withheld step is reported, the sharing step stops the pass)."""
    objects = run.plan.rendered.get(condition) or []
    if not objects:
        run.set(condition, False, *not_applied(condition, run.plan.decision))
        return True
    await apply_objects(run, condition, objects)
    return True
