"""kopf's bookkeeping of each tenant kept in the operator's process, not written to the GpuTenant.

kopf keeps two records per object: its diff base (the last spec and annotations it handled, which
tells a creation from a change) and each handler's progress (retries, delays). Its own storages
keep both in annotations, and its annotation progress storage adds a marker annotation the first
time it stores anything: two PATCHes of every onboarded tenant beyond the finalizer
(docs/performance.md, "API load per tenant"). Neither needs to outlive the process: every handler
of a GpuTenant runs the same idempotent pipeline, so a process that starts without them sees each
tenant as created and runs that pipeline once (as the resume handler would), and a failing handler
starts its retries from the first.

kopf's annotation storages also drop every annotation under their prefix from what they compare,
which hid the operator's own ``gputenant.io/rotate-kubeconfigs`` and ``gputenant.io/retry`` from
kopf's field handlers: a rotation waited for the resync. These storages compare them.

The one write that stays is kopf's wake-up after a delayed retry (`ProcessProgress.touch`): one
annotation changed, which brings the tenant back through the watch when its delay is over.
"""

from __future__ import annotations

import copy

import kopf

from gputenant import GROUP
from gputenant.kube.packed import pack, unpack

TOUCH_ANNOTATION = f"{GROUP}/kopf-touch"
"""What kopf changes on a tenant to be called again when a handler's retry delay is over."""


def _uid(body: kopf.Body) -> str:
    return body.metadata.uid or ""


class ProcessDiffBase(kopf.DiffBaseStorage):
    """The last essence kopf handled, by object uid."""

    def __init__(self) -> None:
        super().__init__()
        self._essences: dict[str, bytes] = {}
        """Each essence as its compact JSON (`kube.packed`)."""

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        essence = self._essences.get(_uid(body))
        return unpack(essence) if essence is not None else None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if _uid(body):
            self._essences[_uid(body)] = pack(essence)

    def forget(self, uid: str) -> None:
        self._essences.pop(uid, None)

    def __len__(self) -> int:
        return len(self._essences)


class ProcessProgress(kopf.ProgressStorage):
    """Each handler's progress on each object, by object uid and handler id."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[tuple[str, str], kopf.ProgressRecord] = {}

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        record = self._records.get((_uid(body), key))
        return copy.deepcopy(record) if record is not None else None

    def store(self, *, key: kopf.HandlerId, record: kopf.ProgressRecord, body: kopf.Body,
              patch: kopf.Patch) -> None:
        self._records[(_uid(body), key)] = copy.deepcopy(record)

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        self._records.pop((_uid(body), key), None)

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        """Set the wake-up annotation to `value` (None: remove it) when the tenant holds another."""
        if (body.metadata.annotations or {}).get(TOUCH_ANNOTATION) != value:
            patch.setdefault("metadata", {}).setdefault("annotations", {})[TOUCH_ANNOTATION] = value

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        """The essence without the wake-up annotation, which is no change of the tenant."""
        essence = super().clear(essence=essence)
        essence.get("metadata", {}).get("annotations", {}).pop(TOUCH_ANNOTATION, None)
        self.remove_empty_stanzas(essence)
        return essence

    def forget(self, uid: str) -> None:
        for key in [key for key in self._records if key[0] == uid]:
            del self._records[key]

    def __len__(self) -> int:
        return len(self._records)
