"""What the operator's watches hold, read by a pass instead of the API server: kopf indexes that
kopf fills from its first listing before any handler runs and updates from each event before that
event's handlers (`gputenant.indexes`). controller-runtime's clients read from their informers'
caches the same way.

The indexes reach the pipeline through the handlers: kopf passes them to every handler among its
keyword arguments, and the first handler hands them over (`WatchCache.hand_over`). Until then, and
in a process that runs no kopf (the in-process tests), a pass asks the API server.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

HOST_PODS_INDEX = "host_pods"
"""The pods of the tenants' host namespaces, by namespace."""
QUEUES_INDEX = "queues"
"""The KAI Queues, by name."""
TENANTS_INDEX = "tenants"
"""The GpuTenants, by name."""


class WatchCache:
    """The kopf indexes a pass reads; each None until a handler hands it over."""

    def __init__(self) -> None:
        self.pods: Mapping[str, Collection[dict]] | None = None
        self.queues: Mapping[str, Collection[dict]] | None = None
        self.tenants: Mapping[str, Collection[dict]] | None = None

    def hand_over(self, handler_kwargs: Mapping[str, Any]) -> None:
        """Keep the indexes kopf passes to every handler, the first time one does."""
        if self.pods is None and HOST_PODS_INDEX in handler_kwargs:
            self.pods = handler_kwargs[HOST_PODS_INDEX]
        if self.queues is None and QUEUES_INDEX in handler_kwargs:
            self.queues = handler_kwargs[QUEUES_INDEX]
        if self.tenants is None and TENANTS_INDEX in handler_kwargs:
            self.tenants = handler_kwargs[TENANTS_INDEX]

    def pods_in(self, namespace: str) -> list[dict] | None:
        """The namespace's pods; None: no index to read, list them."""
        if self.pods is None:
            return None
        return list(self.pods.get(namespace, ()))

    def queue(self, name: str) -> tuple[bool, dict | None]:
        """(known, the Queue or None when there is none); known False: no index, GET it."""
        if self.queues is None:
            return False, None
        found = list(self.queues.get(name, ()))
        return True, (found[0] if found else None)

    def tenant(self, name: str) -> dict | None:
        """The GpuTenant as the watch last saw it; None: not in the index, or no index."""
        found = list((self.tenants or {}).get(name, ()))
        return found[0] if found else None
