"""Apply desired objects, writing only what differs from the live state.

Reads are batched: one label-selected LIST per kind and namespace per reconcile (LiveSnapshot)
instead of one GET per object, so a resync of hundreds of tenants costs a few reads each and no
writes; in a namespace the same reconcile created there is nothing to list. Namespaced kinds are
listed in the object's namespace only: the operator may hold no cluster-wide right on them (the Helm
chart's least-privilege RBAC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant.kube.client import KubeClient
from gputenant.kube.compare import holds


def object_key(obj: dict) -> tuple[str, str, str, str]:
    metadata = obj["metadata"]
    return obj["apiVersion"], obj["kind"], metadata.get("namespace") or "", metadata["name"]


@dataclass
class LiveSnapshot:
    """The live objects carrying a label selector, listed once per kind and namespace on first use."""

    client: KubeClient
    label_selector: str
    _objects: dict[tuple[str, str, str], dict[str, dict]] = field(default_factory=dict)
    _new_namespaces: set[str] = field(default_factory=set)
    _fetched: dict[tuple[str, str, str, str], dict | None] = field(default_factory=dict)

    async def lookup(self, api_version: str, kind: str, name: str,
                     namespace: str | None = None) -> dict | None:
        """The live object if it carries the selector's labels, else None (then GET it)."""
        fetched = (api_version, kind, namespace or "", name)
        if fetched in self._fetched:
            live = self._fetched[fetched]
            return live if live is not None and self.selects(live) else None
        await self.items(api_version, kind, namespace)
        return self._objects[(api_version, kind, namespace or "")].get(name)

    async def items(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict]:
        """Every live object of a kind carrying the selector's labels, in `namespace` (None: a
        cluster-scoped kind), listed on first use."""
        key = (api_version, kind, namespace or "")
        if key not in self._objects:
            items = [] if namespace in self._new_namespaces else await self.client.list(
                api_version, kind, namespace=namespace, label_selector=self.label_selector)
            self._objects[key] = {item["metadata"]["name"]: item for item in items}
        return list(self._objects[key].values())

    def namespace_created(self, namespace: str) -> None:
        """`namespace` was created by a write of this snapshot's pass: it holds no labelled object
        but those the pass writes (kept by ``remember``), so none of its kinds needs a LIST. Lists
        of a namespace that already existed are never skipped."""
        self._new_namespaces.add(namespace)

    def created(self, namespace: str) -> bool:
        """Whether this snapshot's pass created `namespace` (so it holds nothing older than the pass)."""
        return namespace in self._new_namespaces

    def fetched(self, obj: dict, live: dict | None) -> None:
        """`live` is what a GET of `obj`'s name just answered (None: absent): lookups of that name use
        it and list nothing. For a kind a step reads by name anyway, such as the one Queue named
        after the tenant, where a labelled LIST cannot tell "absent" from "someone else's"."""
        metadata = obj["metadata"]
        self._fetched[(obj["apiVersion"], obj["kind"], metadata.get("namespace") or "", metadata["name"])] = live

    def selects(self, obj: dict) -> bool:
        """Whether `obj`'s own labels match the selector (equality terms only; any other term
        counts as no match). A live object that holds such an `obj` carries those labels, so it
        is in the kind's LIST whenever it exists."""
        labels = obj["metadata"].get("labels") or {}
        for term in self.label_selector.split(","):
            key, equals, value = term.partition("=")
            if not equals or key.endswith("!") or value.startswith("=") or labels.get(key.strip()) != value.strip():
                return False
        return True

    def remember(self, obj: dict) -> None:
        """Keep the server's answer to a write, so later lookups see it."""
        metadata = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], metadata.get("namespace") or "")
        if key in self._objects:
            self._objects[key][metadata["name"]] = obj
        if (*key, metadata["name"]) in self._fetched:
            self._fetched[(*key, metadata["name"])] = obj



@dataclass
class ApplyResult:
    applied: list[tuple[str, str, str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str, str, str]] = field(default_factory=list)


class Applier:
    """Server-side apply with a no-op check against a LiveSnapshot (or a GET for unlabelled ones).

    An object that carries the snapshot's labels and is absent from its LIST is not fetched: if it
    exists without those labels it cannot hold the desired object anyway, so the write follows
    either way (and labels it, so the next LIST finds it)."""

    def __init__(self, client: KubeClient, snapshot: LiveSnapshot):
        self.client = client
        self.snapshot = snapshot
        self.result = ApplyResult()

    async def live(self, obj: dict) -> dict | None:
        metadata = obj["metadata"]
        found = await self.snapshot.lookup(obj["apiVersion"], obj["kind"], metadata["name"],
                                           metadata.get("namespace"))
        if found is None and not self.snapshot.selects(obj):
            found = await self.client.get(obj["apiVersion"], obj["kind"], metadata["name"],
                                          metadata.get("namespace"))
        return found

    async def ensure(self, obj: dict) -> dict:
        """Make the live object hold `obj`; write only when it does not already."""
        live = await self.live(obj)
        if live is not None and holds(obj, live):
            self.result.unchanged.append(object_key(obj))
            return live
        applied, created = await self.client.apply_reporting_creation(obj)
        applied.setdefault("apiVersion", obj["apiVersion"])
        applied.setdefault("kind", obj["kind"])
        self.snapshot.remember(applied)
        if created and (obj["apiVersion"], obj["kind"]) == ("v1", "Namespace"):
            self.snapshot.namespace_created(obj["metadata"]["name"])
        self.result.applied.append(object_key(obj))
        return applied
