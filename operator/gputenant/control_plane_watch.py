"""kopf wiring that follows the tenants' vCluster control planes: a watch on the control-plane pods
the chart labels (``app=vcluster``, filtered by kopf: the operator's one pod watch also serves the
gang PodGroups of ``guard.gang_groups``, so it cannot be narrowed by a label at the API server), so that a pod dying,
turning ready or rolling to a new revision reaches the tenant's status within seconds, not at the
next resync. Each change that matters calls the tenant's pipeline up at once, unless a pass read the
control plane after it or saw the pod as the watch now does (`Cell.control_plane_changed`); what it judges is
`reconcile.controlplane`.

Registered into a cell's kopf registry by `gputenant.handlers.register`.
"""

from __future__ import annotations

import logging

import kopf

from gputenant import naming
from gputenant.cell import Cell
from gputenant.reconcile.controlplane import POD_LABELS, pod_signature

log = logging.getLogger(__name__)

PODS = ("v1", "pods")


def register(registry: kopf.OperatorRegistry, cell: Cell) -> None:
    """The control-plane pod watch, into the cell's registry."""

    @kopf.on.event(*PODS, id="control_plane_pod_changed", labels=POD_LABELS, registry=registry)
    async def control_plane_pod_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs) -> None:
        """Reconcile the pod's tenant when it starts or stops serving, or serves another revision; a pod
        first seen not ready changes nothing. The initial listing (event type None) only records:
        on.resume reconciles every tenant then."""
        await control_plane_pod_event(cell.with_indexes(kwargs), event, body, memo)


async def control_plane_pod_event(cell: Cell, event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo) -> None:
    metadata = body.get("metadata") or {}
    tenant = naming.tenant_of_namespace(metadata.get("namespace") or "", cell.config)
    if tenant is None or (metadata.get("labels") or {}).get("release") != naming.release_name(tenant):
        return
    signature = pod_signature(event.get("type"), dict(body))
    previous = memo.get("signature")
    memo["signature"] = signature
    if event.get("type") is None or signature == previous:
        return
    log.info("tenant %s: control-plane pod %s %s (ready %s); reconciling", tenant, metadata.get("name"),
             (event.get("type") or "").lower(), bool(signature and signature[0]))
    await cell.control_plane_changed(tenant, metadata.get("name") or "", signature)
