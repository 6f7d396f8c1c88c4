"""The deletion path of a tenant whose GpuTenant is being deleted: held while spec.preventDeletion
is true (``DeletionPrevented=True`` in status and one Event, once), else offboarded
(`reconcile.offboard`). `Cell.offboard` runs it under the tenant's lock; kopf's deletion handler
and the in-process test tier both go through that one path."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gputenant.api import conditions as reasons
from gputenant.api.status import DELETION
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile.events import post_event
from gputenant.reconcile.offboard import offboard
from gputenant.reconcile.ports import Releases
from gputenant.reconcile.steps.argocd import argocd_namespaces
from gputenant.tenant_status import conditions as cond
from gputenant.tenant_status.writers import write_conditions
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)


class DeletionHeld(Exception):
    """spec.preventDeletion is true: the deletion waits (the caller retries it later)."""


async def hold_if_prevented(client: KubeClient, body: dict) -> None:
    """Raise DeletionHeld while the tenant's spec.preventDeletion is true, after reporting it."""
    if not (body.get("spec") or {}).get("preventDeletion"):
        return
    await _report_prevented(client, body)
    raise DeletionHeld("spec.preventDeletion is true; set it to false to let the deletion proceed")


async def offboard_tenant(client: KubeClient, releases: Releases, config: OperatorConfig, body: dict) -> None:
    """Remove everything of the tenant `body` (its deletionPolicy decides about the namespace)."""
    spec = body.get("spec") or {}
    await offboard(client, releases, config, body["metadata"]["name"],
                   retain=spec.get("deletionPolicy") == "Retain", argocd_namespaces=argocd_namespaces(body),
                   uid=body["metadata"].get("uid"))


async def _report_prevented(client: KubeClient, body: dict) -> None:
    """DeletionPrevented=True in status and one Event, once; a failed write is retried with the
    deletion (the caller holds it either way)."""
    before = cond.parse((body.get("status") or {}).get("conditions") or [])
    now = datetime.now(UTC)
    conditions = cond.owned(cond.set_condition(
        before, reasons.DELETION_PREVENTED, "True", reasons.PREVENT_DELETION_SET,
        "deletion is blocked while spec.preventDeletion is true", body["metadata"].get("generation"), rfc3339(now)),
        DELETION)
    if conditions == cond.owned(before, DELETION):
        return
    try:
        await write_conditions(client, body["metadata"]["name"], conditions, DELETION)
    except ApiError as error:
        log.warning("tenant %s: could not report DeletionPrevented: %s", body["metadata"]["name"], error)
        return
    await post_event(client, body, "Warning", reasons.DELETION_PREVENTED,
                     "deletion blocked by spec.preventDeletion; set it to false to proceed", now)
