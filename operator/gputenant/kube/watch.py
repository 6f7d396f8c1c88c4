"""List and watch one kind's labelled objects as metadata only, as controller-runtime's metadata
informers do: the API server sends `PartialObjectMetadata` (no spec, no data: a Secret's content
never reaches the operator), filtered by a label selector on the server, so the operator holds a
few hundred bytes per object it owns and nothing of anybody else's: of its labels only the one that
names its owner, and the strings every object repeats (namespaces, managers, owners) held once.

A `Reflector` keeps, per object, what `Seen` summarises, and calls `changed(before, after)` for
every change after its first listing (`after` None: deleted). A watch that ends is resumed from the
last resourceVersion (bookmarks keep it recent); one the server answers 410 Gone is listed again and
the difference reported, so no change is lost across a reconnect.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gputenant.kube.client import KubeClient
from gputenant.kube.errors import ApiError

log = logging.getLogger(__name__)

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""What a reflector accepts: the objects' metadata only (no spec, no data)."""
WATCH_SECONDS = 300
"""How long one watch request stays open before the server ends it and the reflector resumes."""
MAX_BACKOFF_SECONDS = 30.0
TRANSIENT_FAILURES_QUIET = 3
"""Transient failures in a row logged at INFO (an API server still starting answers 429); a refusal
(403: RBAC lacks the rule; 404: the kind is not served) is a warning at once."""


@dataclass(frozen=True, slots=True)
class Seen:
    """What a reflector keeps of one object: who it belongs to and who wrote it last. With slots and
    an integer digest, about 480 bytes an object instead of 790: the reflectors keep some 35 objects
    per tenant."""

    namespace: str
    name: str
    resource_version: str
    owner: str
    """The value of the reflector's owner label ("" when the object has none)."""
    last_writer: str
    """The field manager of the newest entry of managedFields outside any subresource (status is a
    controller's, not a change of the object); "" when there is none. Managers tied in the same
    second are all named, comma-separated."""
    writes: tuple[tuple[str, str, int], ...] = ()
    """Per manager outside any subresource: (manager, time, a digest of the fields it owns). A field
    another hand removes leaves no entry of its own: only the digest of its owner's fields moves."""


def seen(metadata: dict, owner_label: str) -> Seen:
    """The summary of one object's metadata, its owner read from the label `owner_label`."""
    entries = [entry for entry in metadata.get("managedFields") or [] if not entry.get("subresource")]
    newest = max((entry.get("time") or "" for entry in entries), default="")
    writers = sorted({entry.get("manager") or "" for entry in entries if (entry.get("time") or "") == newest})
    return Seen(namespace=sys.intern(metadata.get("namespace") or ""), name=metadata.get("name") or "",
                resource_version=metadata.get("resourceVersion") or "",
                owner=sys.intern((metadata.get("labels") or {}).get(owner_label) or ""),
                last_writer=sys.intern(",".join(writers)),
                writes=tuple(sorted((sys.intern(entry.get("manager") or ""), entry.get("time") or "",
                                     _digest(entry.get("fieldsV1"))) for entry in entries)))


def _digest(fields: object) -> int:
    """64 bits of the fields' SHA-256: compared only with the same manager's digest of the same object."""
    return int.from_bytes(hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).digest()[:8], "big")


Changed = Callable[[Seen | None, Seen | None], None]


async def list_metadata(client: KubeClient, api_version: str, kind: str, label_selector: str) -> tuple[list[dict], str]:
    """The metadata of every object of a kind (all namespaces) matching `label_selector`, and the
    list's resourceVersion to watch from."""
    resource = await client.resource(api_version, kind)
    answer = await client.request("GET", resource.path(None), params={"labelSelector": label_selector},
                                  accept=METADATA_LIST)
    return ([item.get("metadata") or {} for item in answer.get("items") or []],
            (answer.get("metadata") or {}).get("resourceVersion") or "")


async def watch_metadata(client: KubeClient, api_version: str, kind: str, label_selector: str,
                         resource_version: str, seconds: int = WATCH_SECONDS) -> AsyncIterator[tuple[str, dict]]:
    """(event type, object metadata) for each change after `resource_version`, bookmarks included,
    until the server ends the watch after `seconds`; ApiError 410 when `resource_version` is too old
    to resume from."""
    resource = await client.resource(api_version, kind)
    params = {"watch": "1", "labelSelector": label_selector, "resourceVersion": resource_version,
              "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
    async for line in client.stream_lines(resource.path(None), params, METADATA_ONE, seconds + 60):
        if not line.strip():
            continue
        event = json.loads(line)
        found = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise ApiError(int(found.get("code") or 0), str(found.get("reason") or "Error"),
                           str(found.get("message") or ""), "WATCH", resource.path(None))
        yield str(event.get("type")), found.get("metadata") or {}


class Reflector:
    """The metadata of every `api_version`/`kind` object matching `label_selector`, kept current,
    each object's owner read from the label `owner_label`."""

    def __init__(self, client: KubeClient, api_version: str, kind: str, label_selector: str, changed: Changed,
                 owner_label: str):
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.label_selector = label_selector
        self.changed = changed
        self.owner_label = owner_label
        self.objects: dict[tuple[str, str], Seen] = {}
        self.synced = asyncio.Event()
        """Set once the first listing is held."""
        self._resource_version = ""

    async def run(self) -> None:
        """List, then watch until cancelled; failures wait a growing backoff and list again."""
        failures = 0
        while True:
            try:
                if not self._resource_version:
                    await self._list()
                await self._watch()
                failures = 0
            except ApiError as error:
                if error.status == 410:
                    log.debug("%s watch: resourceVersion too old, listing again", self.kind)
                    self._resource_version = ""
                    continue
                failures += 1
                delay = min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** min(failures, 6))
                level = logging.INFO if error.transient and failures <= TRANSIENT_FAILURES_QUIET else logging.WARNING
                log.log(level, "%s watch failed (%s); listing again in %gs", self.kind, error, delay)
                self._resource_version = ""
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        items, resource_version = await list_metadata(self.client, self.api_version, self.kind, self.label_selector)
        listed = {(item.namespace, item.name): item for item in (seen(m, self.owner_label) for m in items)}
        before, self.objects = self.objects, listed
        self._resource_version = resource_version
        log.log(logging.DEBUG if self.synced.is_set() else logging.INFO, "watching %s %s (%d now) as metadata",
                self.kind, self.label_selector, len(listed))
        if self.synced.is_set():
            for key in before.keys() | listed.keys():
                if before.get(key) != listed.get(key):
                    self.changed(before.get(key), listed.get(key))
        self.synced.set()

    async def _watch(self) -> None:
        async for event_type, metadata in watch_metadata(self.client, self.api_version, self.kind,
                                                         self.label_selector, self._resource_version):
            self._resource_version = metadata.get("resourceVersion") or self._resource_version
            if event_type == "BOOKMARK":
                continue
            after = seen(metadata, self.owner_label)
            key = (after.namespace, after.name)
            before = self.objects.get(key)
            if event_type == "DELETED":
                self.objects.pop(key, None)
                self.changed(before, None)
            else:
                self.objects[key] = after
                self.changed(before, after)
