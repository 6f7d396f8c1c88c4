"""Every write of a GpuTenant's status, in one module (as Capsule keeps its Tenant's in one
status.go). Four writers share the status subresource, each applying only the fields it owns under
its own field manager (``<field manager>-<writer>``, `KubeClient.apply_status`): what a writer
stops sending goes, and the others' fields stay, so none reads before writing and none loses
another's. Which conditions a writer owns: `conditions.OWNED_BY`; docs/architecture.md, Status."""

from __future__ import annotations

from collections.abc import Iterable

from gputenant import API_VERSION, KIND
from gputenant.api.status import ATTESTATION, DELETION, FLEET, PIPELINE, USAGE, Condition, UsageStatus
from gputenant.kube import KubeClient
from gputenant.tenant_status import conditions as cond

CONDITION_WRITERS = frozenset({ATTESTATION, DELETION})
"""The writers whose whole part of status is conditions."""


async def write_pipeline(client: KubeClient, name: str, status: dict) -> dict:
    """The pipeline's part (`fields.status_body`): everything but usage; returns the tenant written."""
    return await client.apply_status(API_VERSION, KIND, name, status, PIPELINE)


async def write_conditions(client: KubeClient, name: str, conditions: Iterable[Condition], writer: str) -> None:
    """The conditions `writer` owns among `conditions` (the attestation's IsolationVerified, the
    deletion's DeletionPrevented); any other type in `conditions` is the other writers' and is not
    sent."""
    if writer not in CONDITION_WRITERS:
        raise ValueError(f"{writer} writes more than conditions; use its own writer")
    await client.apply_status(API_VERSION, KIND, name, {"conditions": cond.as_status(cond.owned(conditions, writer))},
                              writer)


async def write_usage(client: KubeClient, name: str, usage: UsageStatus) -> None:
    """The usage loop's part: status.usage only."""
    await client.apply_status(API_VERSION, KIND, name,
                              {"usage": usage.model_dump(mode="json", by_alias=True, exclude_none=True)}, USAGE)


async def write_fleet(client: KubeClient, name: str, status: dict) -> None:
    """A fleet hub's part (`fleet.view.hub_status`): observedGeneration, status.fleet and Ready.
    On a hub no pipeline runs, so Ready has this one writer there."""
    await client.apply_status(API_VERSION, KIND, name, status, FLEET)
