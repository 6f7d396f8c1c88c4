"""The tenant's KAI Queue. Queues are cluster-scoped and named after the tenant, so one made by
someone else (a department queue, another tool's) may already carry the name: it is never taken
over, and offboarding never deletes it."""

from __future__ import annotations

from functools import partial

from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.ownership import owned_by
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.steps.objects import apply_rendered

CONDITION = reasons.QUEUE_READY
KINDS = frozenset({"Queue"})


async def ensure(run: Pass) -> bool:
    for queue in run.plan.rendered.get(CONDITION) or []:
        metadata = queue["metadata"]
        # By name, not the tenant's labelled LIST: it tells "absent" from "someone else's" too. From
        # the operator's Queue index, else one GET.
        live = await run.services.cache.queue(
            metadata["name"], partial(run.client.get, queue["apiVersion"], queue["kind"], metadata["name"]))
        run.snapshot.fetched(queue, live)
        if not owned_by(live, run.uid):
            name = metadata["name"]
            raise StepError(
                reasons.OBJECT_NOT_OWNED,
                f"Queue {name} already exists and was not made by the operator for this tenant; it is left "
                f"as it is. Rename or delete that Queue, or give the tenant another name", transient=True)
    return await apply_rendered(run, CONDITION)
