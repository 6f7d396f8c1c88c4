"""Every object of a CRD rewritten in its storage version, then ``status.storedVersions`` trimmed
to that version: Kubernetes' "Upgrade existing objects to a new stored version", which a release
that moves a CRD's storage version needs before an old version can ever stop being served.

The rewrite is a no-op merge patch carrying the resourceVersion just read: the API server encodes
the object in the storage version, finds the bytes differ from what etcd holds (the old
apiVersion), and stores it. A conflict means someone wrote the object since, which stored it in
the storage version already. ``status.storedVersions`` is trimmed only once every object was
rewritten; a failure before that leaves it as it was, and running again is safe.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from gputenant.kube.client import KubeClient
from gputenant.kube.errors import ApiError

T = TypeVar("T")
SETTLE_SECONDS = 60.0
"""How long to wait out 429 "storage is (re)initializing": the API server rebuilds a CRD's storage
after its storage version changed, and refuses requests for it until done."""


async def _settled(call: Callable[[], Awaitable[T]]) -> T:
    """``call``, again while the API server answers 429 (for at most ``SETTLE_SECONDS``)."""
    async for attempt in AsyncRetrying(retry=retry_if_exception(lambda e: isinstance(e, ApiError) and e.status == 429),
                                       stop=stop_after_delay(SETTLE_SECONDS), wait=wait_exponential(0.2, max=5),
                                       reraise=True):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity reraises")


CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
PAGE = 200
"""Objects per LIST page: each page read in another version is converted in one ConversionReview."""


@dataclass(frozen=True)
class Migration:
    """What one run did: how many objects it rewrote, how many changed or went away meanwhile
    (each stored in the storage version by that write, or gone)."""

    crd: str
    storage_version: str
    stored_before: tuple[str, ...]
    rewritten: int
    moved_meanwhile: int = 0

    @property
    def needed(self) -> bool:
        return self.stored_before != (self.storage_version,)

    def summary(self) -> str:
        if not self.needed:
            return f"{self.crd}: every object is stored as {self.storage_version}; nothing to do"
        meanwhile = f" ({self.moved_meanwhile} changed or deleted meanwhile)" if self.moved_meanwhile else ""
        return (f"{self.crd}: {self.rewritten} objects rewritten as {self.storage_version}{meanwhile}; storedVersions "
                f"[{', '.join(self.stored_before)}] -> [{self.storage_version}]")


async def _pages(client: KubeClient, api_version: str, kind: str) -> AsyncIterator[list[dict]]:
    """Every object of the kind, a page at a time (waiting out 429 while the storage re-initialises)."""
    resource = await client.resource(api_version, kind)
    token = ""
    while True:
        params = {"limit": str(PAGE), **({"continue": token} if token else {})}
        page = await _settled(functools.partial(client.request, "GET", resource.path(None), params=params))
        yield page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


async def migrate_storage(client: KubeClient, crd_name: str) -> Migration:
    """Rewrite every object of ``crd_name`` in its storage version and trim ``storedVersions``.
    Objects stored in another version are read through the CRD's conversion, so it must answer."""
    crd = await client.get(*CRD_API, crd_name)
    if crd is None:
        raise ApiError(404, "NotFound", f"CustomResourceDefinition {crd_name} does not exist")
    storage = next(version["name"] for version in crd["spec"]["versions"] if version.get("storage"))
    stored = tuple((crd.get("status") or {}).get("storedVersions") or ())
    if stored == (storage,):
        return Migration(crd_name, storage, stored, 0)
    api_version, kind = f"{crd['spec']['group']}/{storage}", crd["spec"]["names"]["kind"]
    rewritten = moved = 0
    async for page in _pages(client, api_version, kind):
        for obj in page:
            metadata = obj["metadata"]
            try:
                await client.patch(api_version, kind, metadata["name"],
                                   {"metadata": {"resourceVersion": metadata["resourceVersion"]}},
                                   namespace=metadata.get("namespace"))
                rewritten += 1
            except ApiError as error:
                if error.status not in (404, 409):
                    raise
                moved += 1
    await client.patch(*CRD_API, crd_name, {"status": {"storedVersions": [storage]}}, subresource="status")
    return Migration(crd_name, storage, stored, rewritten, moved)
