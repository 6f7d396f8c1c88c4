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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from gputenant.kube.client import KubeClient
from gputenant.kube.errors import ApiError

T = TypeVar("T")
SETTLE_SECONDS = 60.0
"""How long to wait out 429 "storage is (re)initializing": the API server rebuilds a CRD's storage
after its storage version changed, and refuses requests for it until done."""


async def _settled(call: Callable[[], Awaitable[T]]) -> T:
    async for attempt in AsyncRetrying(retry=retry_if_exception(lambda e: isinstance(e, ApiError) and e.status == 429),
                                       stop=stop_after_delay(SETTLE_SECONDS), wait=wait_exponential(0.2, max=5),
                                       reraise=True):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity reraises")

CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


@dataclass(frozen=True)
class Migration:
    crd: str
    storage_version: str
    stored_before: tuple[str, ...]
    rewritten: int

    @property
    def needed(self) -> bool:
        return self.stored_before != (self.storage_version,)

    def summary(self) -> str:
        if not self.needed:
            return f"{self.crd}: every object is stored as {self.storage_version}; nothing to do"
        return (f"{self.crd}: {self.rewritten} objects rewritten as {self.storage_version}; storedVersions "
                f"[{', '.join(self.stored_before)}] -> [{self.storage_version}]")


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
    rewritten = 0
    for obj in await _settled(lambda: client.list(api_version, kind)):
        metadata = obj["metadata"]
        try:
            await client.patch(api_version, kind, metadata["name"], {"metadata": {"resourceVersion": metadata["resourceVersion"]}},
                               namespace=metadata.get("namespace"))
        except ApiError as error:
            if error.status not in (404, 409):
                raise
        rewritten += 1
    await client.request("PATCH", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{quote(crd_name)}/status",
                         body={"status": {"storedVersions": [storage]}}, content_type="application/merge-patch+json")
    return Migration(crd_name, storage, stored, rewritten)
