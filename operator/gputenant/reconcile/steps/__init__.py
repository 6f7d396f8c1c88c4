"""The reconcile pipeline as a table: each step sets one condition, in this order.

A step returns True to let the pass go on, False to end it there (the steps after it keep their last
condition), or raises StepError / ApiError, which the pipeline turns into the step's condition.
Rendered objects go to the step whose ``kinds`` list their kind; every other kind to SharingReady.
To add a step: a module here with ``CONDITION``, ``KINDS`` and ``ensure``, a row below, and its
condition type in ``gputenant.api.conditions.PART_CONDITIONS``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gputenant.reconcile.context import Pass
from gputenant.reconcile.steps import argocd, kubeconfigs, namespace, network, queue, quota, rbac, sharing, vcluster
from gputenant.reconcile.steps.objects import not_applied


@dataclass(frozen=True)
class Step:
    condition: str
    ensure: Callable[[Pass], Awaitable[bool]]
    kinds: frozenset[str] = frozenset()
    """Rendered kinds this step applies."""
    objects_only: bool = False
    """All the step does is put its rendered objects in place: once it did, at the same rendered
    objects, a look again while the control plane starts may leave it alone (no LIST, no write)."""


OBJECT_STEPS = (namespace, quota, rbac, network, queue)
STEPS: tuple[Step, ...] = tuple(
    Step(module.CONDITION, module.ensure, module.KINDS, objects_only=module in OBJECT_STEPS)
    for module in (*OBJECT_STEPS, sharing, vcluster, kubeconfigs, argocd)
)


def condition_of(kind: str) -> str:
    """The condition of the step that applies rendered objects of `kind`."""
    return next((step.condition for step in STEPS if kind in step.kinds), sharing.CONDITION)


__all__ = ["STEPS", "Step", "condition_of", "not_applied"]
