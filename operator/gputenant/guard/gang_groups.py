"""The operator writes a gang's PodGroup after admission, never the webhook.

A webhook that wrote objects before validation decided would leave them behind for every refused
pod (and could be made to write any number of them). So the guard's mutation only names the
PodGroup (``pod-group-name``, ``guard.gangs``) and this kopf handler, in the operator, applies it
once a member pod exists: created with the first member as owner, each further member added as one
more non-controller ownerReference, so the garbage collector deletes the PodGroup with its last
member. The tenant's ResourceQuota counts PodGroups (``count/podgroups.scheduling.run.ai``,
``render.tenant.quota_hard``), so a tenant cannot make the operator write more than its quota allows.

Until its PodGroup exists KAI leaves the member alone: the pod-grouper skips an ownerless pod that
carries ``pod-group-name`` (``pod_controller.go: isOrphanPodWithPodGroup``) and the scheduler has no
PodGroup to schedule it with. A refused write is retried with backoff (a new tenant's quota refuses
every PodGroup until the quota controller has counted them once; the API server may be busy), then
reported as a Warning Event on the member pod (which vCluster syncs to the virtual pod) and retried
on the pod's next event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kopf

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.guard.gangs import (
    POD_GROUP_ANNOTATION,
    POD_GROUP_API_VERSION,
    admitted_gang,
    membership_patch,
    pod_group,
)
from gputenant.guard.keys import GANG_SIZE_ANNOTATION
from gputenant.kube import ApiError, KubeClient
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)

HANDLER_ID = "gang-pod-group"
ATTEMPTS = 5
"""Conflicting writes of concurrent members (409) are re-read and retried this often."""
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
"""Seconds between the tries of a refused or failed write (a minute in all): the quota controller
counts a new namespace's PodGroups within its 30 s discovery period."""


async def ensure_gang_group(client: KubeClient, pod: dict, namespace_tenant: str | None) -> bool:
    """Make the admitted gang member `pod` an owner of its gang's PodGroup, creating it for the first
    member; no write when it is one already. False for a pod that is no admitted gang member of
    `namespace_tenant`, the tenant its namespace belongs to."""
    gang = admitted_gang(pod, namespace_tenant)
    if gang is None:
        return False
    tenant_name, queue = gang
    metadata = pod["metadata"]
    name = metadata["annotations"][POD_GROUP_ANNOTATION]
    for _ in range(ATTEMPTS):
        group = await client.get(POD_GROUP_API_VERSION, "PodGroup", name, metadata["namespace"])
        try:
            if group is None:
                await client.create(pod_group(pod, tenant_name, metadata["namespace"], queue))
                return True
            patch = membership_patch(group, pod)
            if patch is not None:
                await client.patch(POD_GROUP_API_VERSION, "PodGroup", name, patch, metadata["namespace"])
            return True
        except ApiError as error:
            if error.status != 409:
                raise
    raise ApiError(409, "Conflict", f"PodGroup {name} changed under every one of {ATTEMPTS} attempts")


class GangGroups:
    """The handler's state: the members known to own their PodGroup, so a pod's later events (status
    updates while it waits) cost no API call."""

    def __init__(self, client: Callable[[], KubeClient]) -> None:
        self.client = client
        self.owners: set[str] = set()
        self.tenants: dict[str, str | None] = {}

    async def namespace_tenant(self, client: KubeClient, namespace: str) -> str | None:
        """The tenant label the operator put on a namespace (tenants cannot label host namespaces); read
        once per namespace."""
        if namespace not in self.tenants:
            found = await client.get("v1", "Namespace", namespace)
            self.tenants[namespace] = ((found or {}).get("metadata", {}).get("labels") or {}).get(naming.TENANT_LABEL)
        return self.tenants[namespace]

    async def on_event(self, event_type: str | None, pod: dict) -> None:
        """Handle one watch event of a gang member (type None: the initial listing)."""
        uid = pod["metadata"].get("uid", "")
        if event_type == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            self.owners.discard(uid)
            return
        if uid in self.owners:
            return
        client = self.client()
        for delay in (*RETRY_DELAYS, None):
            try:
                tenant = await self.namespace_tenant(client, pod["metadata"]["namespace"])
                if await ensure_gang_group(client, pod, tenant):
                    self.owners.add(uid)
                return
            except ApiError as error:
                if delay is None or not (error.transient or error.forbidden):
                    log.warning("gang PodGroup of pod %s/%s not written: %s", pod["metadata"]["namespace"],
                                pod["metadata"]["name"], error)
                    await _report(client, pod, error)
                    return
                await asyncio.sleep(delay)


async def _report(client: KubeClient, pod: dict, error: ApiError) -> None:
    message = (f"the PodGroup of this pod's gang ({pod['metadata']['annotations'][POD_GROUP_ANNOTATION]}) was "
               f"refused: {error.message}; the gang waits. If the namespace's PodGroup quota is spent, delete "
               "finished jobs or raise the tenant's spec.quotas.pods")
    try:
        await client.post_event({"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]}, "Warning",
                                reasons.GANG_GROUP_REFUSED, message, rfc3339(datetime.now(UTC)))
    except ApiError as event_error:
        log.warning("event about pod %s/%s not posted: %s", pod["metadata"]["namespace"], pod["metadata"]["name"],
                    event_error)


def register(registry: kopf.OperatorRegistry, client: Callable[[], KubeClient]) -> GangGroups:
    """Add the gang PodGroup handler: events of pods that ask for a gang and carry a PodGroup name (an
    event handler, so kopf writes no progress annotations onto tenant pods)."""
    groups = GangGroups(client)

    @kopf.on.event("", "v1", "pods", id=HANDLER_ID, registry=registry,
                   annotations={GANG_SIZE_ANNOTATION: kopf.PRESENT, POD_GROUP_ANNOTATION: kopf.PRESENT})
    async def gang_member(type: str, body: kopf.Body, **_: Any) -> None:
        await groups.on_event(type, dict(body))

    return groups
