"""Removing a tenant: the vCluster release, then every object labelled with the tenant, then the
host namespace (deletionPolicy Delete) or the namespace kept without our labels and ownerRefs
(Retain). Idempotent: a retry after a crash continues where the last attempt stopped.

Namespaced objects are listed in the host namespace (and Argo CD Secrets in Argo CD's), never
cluster-wide: with the Helm chart's RBAC the operator holds namespaced rights only through its own
RoleBinding in the host namespace, which is therefore removed last (or by the namespace deletion).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from gputenant import KIND, naming
from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile.ownership import tenant_owner_uid
from gputenant.reconcile.ports import Releases, StepError

CLUSTER_SWEPT_KINDS = (("scheduling.run.ai/v2", "Queue"),)
"""Cluster-scoped objects the operator labels for a tenant, besides the namespace itself."""
SWEPT_KINDS = (
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("v1", "ServiceAccount"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
)
"""Namespaced objects the operator labels for a tenant in its host namespace."""
OUR_LABELS = (naming.TENANT_LABEL, naming.TRUST_LABEL, naming.COMPONENT_LABEL, naming.MANAGED_BY_LABEL)
NAMESPACE_WAIT_SECONDS = 60.0
"""How long one offboarding waits for the host namespace to be deleted before it asks to be
retried: the namespace controller takes seconds to a minute, a normal wait (logged at INFO), not
a failed attempt (kopf logs those as ERROR)."""

log = logging.getLogger(__name__)


async def offboard(client: KubeClient, releases: Releases, config: OperatorConfig, tenant: str,
                   *, retain: bool, argocd_namespaces: Iterable[str] = (), uid: str | None = None) -> None:
    """Waits up to NAMESPACE_WAIT_SECONDS for the host namespace to be deleted, then raises
    StepError(transient) while it is still terminating, so the caller retries. `argocd_namespaces`: where the tenant's Argo CD cluster Secret may be (`steps.argocd.argocd_namespaces`).
    `uid`: the tenant's; a cluster-scoped object owned by another GpuTenant is never deleted."""
    namespace = naming.host_namespace(tenant, config)
    selector = f"{naming.TENANT_LABEL}={tenant}"
    live = await client.get("v1", "Namespace", namespace)
    if live is not None and live["metadata"].get("deletionTimestamp"):
        # The namespace controller may already have removed the operator's RoleBinding, so Helm
        # and the sweep would be refused; wait for the namespace to go.
        await wait_until_deleted(client, namespace)
        live = None
    if live is not None:
        await releases.uninstall(naming.release_name(tenant), namespace)
        for api_version, kind in SWEPT_KINDS:
            for obj in await _labelled(client, api_version, kind, selector, namespace):
                if not _is_operator_access(obj):
                    await client.delete(api_version, kind, obj["metadata"]["name"], namespace)
    for argocd_namespace in argocd_namespaces:
        for secret in await _argocd_secrets(client, selector, argocd_namespace):
            await client.delete("v1", "Secret", secret["metadata"]["name"], argocd_namespace)
    await _sweep_cluster_scoped(client, selector, uid)
    if live is None:
        return
    if retain:
        await _release_namespace(client, live, tenant)
        if config.tenant_namespace_cluster_role:
            await client.delete("rbac.authorization.k8s.io/v1", "RoleBinding", naming.OPERATOR_ACCESS_BINDING_NAME,
                                namespace)
        return
    await client.delete("v1", "Namespace", namespace)
    await wait_until_deleted(client, namespace)


async def wait_until_deleted(client: KubeClient, namespace: str) -> None:
    """Return once `namespace` is gone; StepError(NamespaceTerminating) after NAMESPACE_WAIT_SECONDS."""
    log.info("waiting up to %gs for namespace %s to be deleted", NAMESPACE_WAIT_SECONDS, namespace)
    deadline = time.monotonic() + NAMESPACE_WAIT_SECONDS
    while await client.get("v1", "Namespace", namespace) is not None:
        if time.monotonic() > deadline:
            raise _terminating(namespace)
        await asyncio.sleep(1)


async def _sweep_cluster_scoped(client: KubeClient, selector: str, uid: str | None) -> None:
    """The tenant's labelled cluster-scoped objects, except any another GpuTenant owns."""
    for api_version, kind in CLUSTER_SWEPT_KINDS:
        for obj in await _labelled(client, api_version, kind, selector):
            if uid is None or tenant_owner_uid(obj) in (None, uid):
                await client.delete(api_version, kind, obj["metadata"]["name"])


def _terminating(namespace: str) -> StepError:
    return StepError(reasons.NAMESPACE_TERMINATING, f"waiting for namespace {namespace} to be deleted", transient=True)


def _is_operator_access(obj: dict) -> bool:
    return (obj["kind"] == "RoleBinding" and obj["metadata"]["name"] == naming.OPERATOR_ACCESS_BINDING_NAME
            and (obj["metadata"].get("labels") or {}).get(naming.COMPONENT_LABEL) == naming.OPERATOR_ACCESS_COMPONENT)


async def _labelled(client: KubeClient, api_version: str, kind: str, selector: str,
                    namespace: str | None = None) -> list[dict]:
    """Objects of a kind carrying `selector`; none when the kind is not served (e.g. no KAI CRD)."""
    try:
        return await client.list(api_version, kind, namespace=namespace, label_selector=selector)
    except ApiError as error:
        if error.not_found:
            return []
        raise


async def _argocd_secrets(client: KubeClient, selector: str, namespace: str) -> list[dict]:
    """The tenant's Argo CD cluster Secrets in one Argo CD namespace. Where the operator may not list
    Secrets it could not have written one, so a refusal means there is nothing to remove."""
    try:
        secrets = await _labelled(client, "v1", "Secret", f"{selector},{naming.COMPONENT_LABEL}=argocd", namespace)
    except ApiError as error:
        if error.forbidden:
            return []
        raise
    return secrets


async def _release_namespace(client: KubeClient, namespace: dict, tenant: str) -> None:
    """Keep the namespace and its data, but no longer as the tenant's: drop our labels and ownerRef."""
    metadata = namespace["metadata"]
    labels = metadata.get("labels") or {}
    owners = metadata.get("ownerReferences") or []
    kept_owners = [ref for ref in owners if ref.get("kind") != KIND]
    patch: dict = {}
    if any(key in labels for key in OUR_LABELS):
        patch["labels"] = {key: None for key in OUR_LABELS if key in labels}
    if len(kept_owners) != len(owners):
        patch["ownerReferences"] = kept_owners or None
    if patch:
        await client.patch("v1", "Namespace", metadata["name"], {"metadata": patch})
