"""Event-driven drift, as controller-runtime's `Owns()`: the kinds the operator writes for tenants
(`reconcile.drift.OWNED_KINDS`) watched cluster-wide as metadata only and selected by the tenant
label on the server (`kube.watch.Reflector`: no spec, no Secret data), and a change by any other
hand enqueues the owning tenant on the cell's work queue. A deleted NetworkPolicy or an edited Role
is repaired within seconds; the resync is the safety net for what a watch could miss, every
few hours (`gputenant run --resync-seconds`).

Started by the cell's startup handler under its loop supervisor (a watch that fails is started
again); a kind the API server does not serve (KAI's Queue without KAI) is retried the same way.
"""

from __future__ import annotations

import logging

from gputenant import naming
from gputenant.cell import Cell
from gputenant.kube.watch import Changed, Reflector, Seen
from gputenant.reconcile.drift import OWNED_KINDS, SELECTOR, drifted_tenant
from gputenant.work_queue import Urgency

log = logging.getLogger(__name__)


def owned_reflectors(cell: Cell) -> list[Reflector]:
    """One reflector per owned kind (Secrets only with `watch_owned_secrets`), each enqueueing the
    tenant of what another hand changed."""
    return [Reflector(cell.client, api_version, kind, SELECTOR, changed_by(cell, kind), owner_label=naming.TENANT_LABEL)
            for api_version, kind in OWNED_KINDS if kind != "Secret" or cell.watch_owned_secrets]


def changed_by(cell: Cell, kind: str) -> Changed:
    def changed(before: Seen | None, after: Seen | None) -> None:
        tenant = drifted_tenant(before, after, cell.config.field_manager)
        if tenant is None or not cell.serves(tenant):
            return
        current = after or before
        log.info("tenant %s: %s %s/%s %s by another hand; reconciling", tenant, kind,
                 current.namespace if current else "", current.name if current else "",
                 "deleted" if after is None else "changed")
        cell.metrics.drift_seen(kind)
        cell.enqueue(tenant, Urgency.CHANGE)
    return changed


def start_owned_watches(cell: Cell) -> list[Reflector]:
    """The owned-kind watches, under the cell's loop supervisor."""
    reflectors = owned_reflectors(cell)
    for reflector in reflectors:
        cell.loops.start(f"watch-{reflector.kind.lower()}", reflector.run, cell.loop_seconds)
    cell.owned = reflectors
    return reflectors
