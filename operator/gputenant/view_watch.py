"""kopf wiring that keeps a tenant's view (`reconcile.view`, shown inside its vCluster) current
without a periodic pass: the view shows the tenant's GPU pods (running, or why one waits), its usage
and its IsolationVerified condition, so a change of any of them queues a look again, which leaves the
converged object steps alone and writes the view if it changed. A burst of pod changes is one look
per `VIEW_SETTLE_SECONDS` (the work queue keeps the earlier of two).

The pod events ride on the pod watch the operator runs anyway; the status ones on its GpuTenant
watch (the usage and attestation loops write those fields, the pipeline never does).

Registered into a cell's kopf registry by `gputenant.handlers.register`.
"""

from __future__ import annotations

import kopf

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.cell import Cell
from gputenant.render.tenant_view import pod_signature_for_view, status_signature_for_view

PODS = ("v1", "pods")


def register(registry: kopf.OperatorRegistry, cell: Cell) -> None:
    """The two watches of what a tenant's view shows, into the cell's registry."""

    def a_gpu_pod_of_a_tenant(namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_) -> bool:
        """kopf runs (and logs) the handler only for these: a pod the view lists, or listed before."""
        return naming.tenant_of_namespace(namespace or "", cell.config) is not None and (
            "view_pod" in memo or pod_signature_for_view(dict(body)) is not None)

    def status_moved(body: kopf.Body, memo: kopf.Memo, **_) -> bool:
        """... and for a tenant only when what the view shows of its status moved (or is unknown)."""
        return status_signature_for_view(body.get("status") or {}) != memo.get("view_status")

    @kopf.on.event(*PODS, id="view_pod_changed", when=a_gpu_pod_of_a_tenant, registry=registry)
    async def view_pod_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs) -> None:
        """A GPU pod of a tenant started, was bound, waits for another reason or went."""
        signature = None if event.get("type") == "DELETED" else pod_signature_for_view(dict(body))
        if _changed(memo, "view_pod", signature, event, first_sighting_counts=True):
            tenant = naming.tenant_of_namespace(body.get("metadata", {}).get("namespace") or "", cell.config)
            if tenant is not None:
                cell.with_indexes(kwargs).view_changed(tenant)

    @kopf.on.event(GROUP, VERSION, PLURAL, id="view_status_changed", when=status_moved, registry=registry)
    async def view_status_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs) -> None:
        """The usage or attestation loop wrote the tenant's usage or IsolationVerified."""
        if _changed(memo, "view_status", status_signature_for_view(body.get("status") or {}), event,
                    first_sighting_counts=False):
            cell.with_indexes(kwargs).view_changed(body["metadata"]["name"])


def _changed(memo: kopf.Memo, key: str, signature: object, event: kopf.RawEvent, *,
             first_sighting_counts: bool) -> bool:
    """Whether the object's `signature` moved since the last event (kopf keeps `memo` per object).
    The first listing (event type None) only records it; so does an object's first event when
    `first_sighting_counts` is false: a new tenant's own pass writes its first view, and a look
    again queued ahead of it (FINISH goes before CHANGE) would onboard it out of turn."""
    seen = key in memo
    previous = memo.get(key)
    memo[key] = signature
    if event.get("type") is None or (not seen and not first_sighting_counts):
        return False
    return signature != previous
