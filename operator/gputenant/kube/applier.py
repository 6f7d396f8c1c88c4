"""Apply desired objects, writing only what differs from the live state.

Reads are batched: one label-selected LIST per kind per reconcile (LiveSnapshot) instead of one
GET per object, so a resync of hundreds of tenants costs a few reads each and no writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gputenant.kube.client import KubeClient
from gputenant.kube.compare import holds


def object_key(obj: dict) -> tuple[str, str, str, str]:
    metadata = obj["metadata"]
    return obj["apiVersion"], obj["kind"], metadata.get("namespace") or "", metadata["name"]


@dataclass
class LiveSnapshot:
    """The live objects carrying a label selector, listed once per kind on first use."""

    client: KubeClient
    label_selector: str
    _objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = field(default_factory=dict)

    async def lookup(self, api_version: str, kind: str, name: str,
                     namespace: Optional[str] = None) -> Optional[dict]:
        """The live object if it carries the selector's labels, else None (then GET it)."""
        await self.items(api_version, kind)
        return self._objects[(api_version, kind)].get((namespace or "", name))

    async def items(self, api_version: str, kind: str) -> list[dict]:
        """Every live object of a kind carrying the selector's labels (listed on first use)."""
        kind_key = (api_version, kind)
        if kind_key not in self._objects:
            items = await self.client.list(api_version, kind, label_selector=self.label_selector)
            self._objects[kind_key] = {
                (item["metadata"].get("namespace") or "", item["metadata"]["name"]): item
                for item in items}
        return list(self._objects[kind_key].values())

    def remember(self, obj: dict) -> None:
        """Keep the server's answer to a write, so later lookups see it."""
        kind_key = (obj["apiVersion"], obj["kind"])
        if kind_key in self._objects:
            metadata = obj["metadata"]
            self._objects[kind_key][(metadata.get("namespace") or "", metadata["name"])] = obj



@dataclass
class ApplyResult:
    applied: list[tuple[str, str, str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str, str, str]] = field(default_factory=list)


class Applier:
    """Server-side apply with a no-op check against a LiveSnapshot (or a GET for unlabelled ones)."""

    def __init__(self, client: KubeClient, snapshot: LiveSnapshot):
        self.client = client
        self.snapshot = snapshot
        self.result = ApplyResult()

    async def live(self, obj: dict) -> Optional[dict]:
        metadata = obj["metadata"]
        found = await self.snapshot.lookup(obj["apiVersion"], obj["kind"], metadata["name"],
                                           metadata.get("namespace"))
        if found is None:
            found = await self.client.get(obj["apiVersion"], obj["kind"], metadata["name"],
                                          metadata.get("namespace"))
        return found

    async def ensure(self, obj: dict) -> dict:
        """Make the live object hold `obj`; write only when it does not already."""
        live = await self.live(obj)
        if holds(obj, live):
            self.result.unchanged.append(object_key(obj))
            return live
        applied = await self.client.apply(obj)
        applied.setdefault("apiVersion", obj["apiVersion"])
        applied.setdefault("kind", obj["kind"])
        self.snapshot.remember(applied)
        self.result.applied.append(object_key(obj))
        return applied
