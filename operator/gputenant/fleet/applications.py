"""The hub's few touches of Argo CD's objects: asking the fleet's ApplicationSet to read the
decisions now, finding each tenant's Application, and approving the deletion of one the
ApplicationSet started deleting (the hub tenant's deletion was approved on the hub)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gputenant.api.group import ARGOCD_APPLICATION_API_VERSION
from gputenant.config.models import OperatorConfig
from gputenant.fleet.decision import TENANT_LABEL
from gputenant.kube import ApiError, KubeClient
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)

DELETION_APPROVED = "argocd.argoproj.io/deletion-approved"
APPLICATION_SET_REFRESH = "argocd.argoproj.io/application-set-refresh"


def application_name(config: OperatorConfig, tenant: str) -> str:
    return f"{config.fleet.application_name_prefix}{tenant}"


def made_by_the_fleet(application: dict, config: OperatorConfig) -> bool:
    """Whether the fleet's ApplicationSet owns `application`: the hub approves no other's deletion."""
    return any(owner.get("kind") == "ApplicationSet" and owner.get("name") == config.fleet.application_set_name
               for owner in application["metadata"].get("ownerReferences") or [])


async def refresh_application_set(client: KubeClient, config: OperatorConfig) -> None:
    """Ask the ApplicationSet to read the decisions now: its generator lists them only every
    requeueAfterSeconds, and only every 3 minutes after a failed generation (which the first one
    is, on a fresh hub, before the anchor exists)."""
    try:
        await client.patch(ARGOCD_APPLICATION_API_VERSION, "ApplicationSet", config.fleet.application_set_name,
                           {"metadata": {"annotations": {APPLICATION_SET_REFRESH: "true"}}},
                           namespace=config.fleet.argocd_namespace)
    except ApiError as error:
        if not error.not_found:
            raise
        log.warning("fleet: ApplicationSet %s/%s not found (fleet.applicationSetName): delivery waits for its requeue",
                    config.fleet.argocd_namespace, config.fleet.application_set_name)


async def tenant_applications(client: KubeClient, config: OperatorConfig) -> dict[str, dict]:
    """Tenant -> its Application, for the fleet's Applications (one LIST)."""
    items = await client.list(ARGOCD_APPLICATION_API_VERSION, "Application", namespace=config.fleet.argocd_namespace,
                              label_selector=TENANT_LABEL)
    return {item["metadata"]["labels"][TENANT_LABEL]: item for item in items if made_by_the_fleet(item, config)}


async def approve_deletion(client: KubeClient, config: OperatorConfig, application: dict) -> None:
    """Approve the deletion of the fleet's `application` once it is being deleted (Argo CD takes an
    approval no older than the deletion)."""
    metadata = application["metadata"]
    if not metadata.get("deletionTimestamp") or not made_by_the_fleet(application, config):
        return
    if (metadata.get("annotations") or {}).get(DELETION_APPROVED, "") >= metadata["deletionTimestamp"]:
        return
    await client.patch(ARGOCD_APPLICATION_API_VERSION, "Application", metadata["name"],
                       {"metadata": {"annotations": {DELETION_APPROVED: rfc3339(datetime.now(UTC))}}},
                       namespace=config.fleet.argocd_namespace)
