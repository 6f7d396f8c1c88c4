"""The platform's parent (department) KAI Queues, from the operator config: the parents of every
tenant's Queue. KAI v0.12 schedules nothing from a top-level queue and drops a queue whose parent
is missing, so each tenant Queue needs one of these (docs/gpu-pools.md, "Parent queues")."""

from __future__ import annotations

from gputenant import naming
from gputenant.config.models import OperatorConfig, ParentQueue, QueueResource
from gputenant.render.templates import render_documents

PARENT_QUEUE_COMPONENT = "parent-queue"


def parent_queue_labels() -> dict[str, str]:
    """The operator's, without a tenant label: offboarding a tenant never selects them."""
    return {naming.MANAGED_BY_LABEL: naming.MANAGED_BY, naming.COMPONENT_LABEL: PARENT_QUEUE_COMPONENT}


def render_parent_queues(config: OperatorConfig) -> list[dict]:
    """One top-level Queue per parent queue of the config (defaultParentQueue included)."""
    labels = {"queue": parent_queue_labels()}
    return [document for queue in config.platform_parent_queues()
            for document in render_documents("queue.yaml", labels=labels, queue=_queue(queue))]


def _queue(queue: ParentQueue) -> dict:
    resources = queue.resources
    return {
        "name": queue.name,
        "display_name": queue.display_name or queue.name,
        "parent": None,
        "priority": queue.priority,
        "gpu": _kai_resource(resources.gpu),
        "cpu": _kai_resource(resources.cpu),
        "memory": _kai_resource(resources.memory),
    }


def _kai_resource(resource: QueueResource) -> dict:
    return {"quota": _kai_number(resource.quota), "limit": _kai_number(resource.limit),
            "overQuotaWeight": _kai_number(resource.over_quota_weight)}


def _kai_number(value: float) -> float | int:
    """An int when whole (renders as ``16``, not ``16.0``)."""
    return int(value) if float(value).is_integer() else value
