"""What the operator's watches hold, read by a pass instead of the API server: kopf indexes that
kopf fills from its first listing before any handler runs and updates from each event before that
event's handlers (`gputenant.indexes`). controller-runtime's clients read from their informers'
caches the same way.

The indexes reach the pipeline through the handlers: kopf passes them to every handler among its
keyword arguments, and the first handler hands them over (`WatchCache.hand_over`). Until then, and
in a process that runs no kopf (the in-process tests), a pass asks the API server. The indexes
hold each object as its compact JSON (`kube.packed`); a read decodes a copy of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from gputenant.kube.packed import unpack

HOST_PODS_INDEX = "host_pods"
"""The pods of the tenants' host namespaces, by namespace."""
QUEUES_INDEX = "queues"
"""The KAI Queues, by name."""
TENANTS_INDEX = "tenants"
"""The GpuTenants, by name."""


class WatchCache:
    """The kopf indexes a pass reads; each None until a handler hands it over."""

    def __init__(self) -> None:
        self.pods: Mapping[str, Collection[bytes]] | None = None
        self.queues: Mapping[str, Collection[bytes]] | None = None
        self.tenants: Mapping[str, Collection[bytes]] | None = None

    def hand_over(self, handler_kwargs: Mapping[str, Any]) -> None:
        """Keep the indexes kopf passes to every handler, the first time one does."""
        if self.pods is None and HOST_PODS_INDEX in handler_kwargs:
            self.pods = handler_kwargs[HOST_PODS_INDEX]
        if self.queues is None and QUEUES_INDEX in handler_kwargs:
            self.queues = handler_kwargs[QUEUES_INDEX]
        if self.tenants is None and TENANTS_INDEX in handler_kwargs:
            self.tenants = handler_kwargs[TENANTS_INDEX]

    async def pods_in(self, namespace: str, listed: Callable[[], Awaitable[list[dict]]]) -> list[dict]:
        """The namespace's pods from the index; without one, `listed()` (a LIST)."""
        if self.pods is None:
            return await listed()
        return [unpack(pod) for pod in self.pods.get(namespace, ())]

    async def queue(self, name: str, read: Callable[[], Awaitable[dict | None]]) -> dict | None:
        """The Queue from the index (None: there is none); without one, `read()` (a GET)."""
        if self.queues is None:
            return await read()
        found = list(self.queues.get(name, ()))
        return unpack(found[0]) if found else None

    def tenant(self, name: str) -> dict | None:
        """The GpuTenant as the watch last saw it; None: not in the index, or no index (the caller
        reads it; whether the watch's copy is current enough is the caller's to judge)."""
        found = list((self.tenants or {}).get(name, ()))
        return unpack(found[0]) if found else None
