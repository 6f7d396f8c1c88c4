"""Removing a tenant: the vCluster release, then every object labelled with the tenant, then the
host namespace (deletionPolicy Delete) or the namespace kept without our labels and ownerRefs
(Retain). Idempotent: a retry after a crash continues where the last attempt stopped."""

from __future__ import annotations

from gputenant import KIND, naming
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile.ports import Releases, StepError

SWEPT_KINDS = (
    ("scheduling.run.ai/v2", "Queue"),
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("v1", "ServiceAccount"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
)
"""Everything the operator may label for a tenant, besides the namespace itself."""
OUR_LABELS = (naming.TENANT_LABEL, naming.TRUST_LABEL, naming.COMPONENT_LABEL, naming.MANAGED_BY_LABEL)


async def offboard(client: KubeClient, releases: Releases, config: OperatorConfig, tenant: str,
                   *, retain: bool) -> None:
    """Raises StepError(transient) while the namespace is still terminating, so the caller retries."""
    namespace = naming.host_namespace(tenant, config)
    await releases.uninstall(naming.release_name(tenant), namespace)
    selector = f"{naming.TENANT_LABEL}={tenant}"
    for api_version, kind in SWEPT_KINDS:
        try:
            objects = await client.list(api_version, kind, label_selector=selector)
        except ApiError as error:
            if error.not_found:
                continue
            raise
        for obj in objects:
            await client.delete(api_version, kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
    live = await client.get("v1", "Namespace", namespace)
    if live is None:
        return
    if retain:
        await _release_namespace(client, live, tenant)
        return
    if not live["metadata"].get("deletionTimestamp"):
        await client.delete("v1", "Namespace", namespace)
    raise StepError("NamespaceTerminating", f"waiting for namespace {namespace} to be deleted", transient=True)


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
