"""Events about a tenant: the one place that posts them, best effort."""

from __future__ import annotations

import logging
from datetime import datetime

from gputenant import API_VERSION, KIND
from gputenant.kube import ApiError, KubeClient
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)



async def post_event(client: KubeClient, tenant: dict, event_type: str, reason: str, message: str,
                     now: datetime) -> bool:
    """A core/v1 Event about the GpuTenant `tenant` (its body). A failure to post one is logged and
    never fails the caller: Events are for humans, the status is the record. False if not posted."""
    try:
        await client.post_event({**tenant, "apiVersion": API_VERSION, "kind": KIND}, event_type, reason, message,
                                rfc3339(now))
    except ApiError as error:
        log.warning("tenant %s: could not post event %s: %s", tenant["metadata"]["name"], reason, error)
        return False
    return True


async def post_pod_event(client: KubeClient, pod: dict, reason: str, message: str, now: datetime) -> bool:
    """A Warning Event about a tenant's host pod; vCluster syncs it onto the pod inside the virtual
    cluster, where the tenant reads it (`kubectl describe pod`). Best effort, as above."""
    try:
        await client.post_event({**pod, "apiVersion": "v1", "kind": "Pod"}, "Warning", reason, message, rfc3339(now))
    except ApiError as error:
        log.warning("pod %s: could not post event %s: %s", pod["metadata"]["name"], reason, error)
        return False
    return True
