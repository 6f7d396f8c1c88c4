"""What the hub shows of a tenant, and the kubeconfigs it hands its owners. Pure.

The hub tenant's status says where the tenant is placed (``status.fleet``) and carries one
condition, Ready: the member tenant's own Ready (its message prefixed with the member's name), or
Unknown while the tenant is on its way to the member or the member cannot be read. Nothing in it
changes unless what the member says changes, so an unchanged fleet costs no status write.

The owners' kubeconfigs are copied from the member into a namespace of the same name on the hub,
readable by the owners only (the same Role as on the member), so `gputenant kubeconfig TENANT`
against the hub works whichever member holds the tenant. The hub holds no member credential in any
place a tenant can read: the copies are the tenant's own kubeconfigs."""

from __future__ import annotations

import json
from typing import Any

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenant
from gputenant.api.status import ConditionStatus
from gputenant.config.models import OperatorConfig
from gputenant.fleet.placement import Placement
from gputenant.render.tenant import kubeconfig_secret_rule, owner_subjects
from gputenant.tenant_status.conditions import MAX_MESSAGE

TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"
COPIES_COMPONENT = "fleet-kubeconfigs"
COPIED_FROM_LABEL = "fleet.gputenant.io/copied-from"
SOURCE_ANNOTATION = "fleet.gputenant.io/source"
"""On a copied kubeconfig Secret: the member, Secret and resourceVersion it was copied from."""


def ready_of(body: dict | None) -> dict | None:
    return next((c for c in ((body or {}).get("status") or {}).get("conditions") or [] if c.get("type") == reasons.READY),
                None)


def hub_status(placement: Placement, member_tenant: dict | None, member_problem: str | None,
               member_read: bool) -> tuple[dict, tuple[ConditionStatus, str, str]]:
    """(status.fleet, Ready's (status, reason, message)) of a hub tenant. `member_read`: the
    member's tenants were read this round (False: unreachable, `member_problem` says why)."""
    fleet: dict[str, Any] = {"reason": placement.reason, "message": placement.message}
    if placement.cluster is None:
        return fleet, (ConditionStatus.FALSE, placement.reason, _bounded(placement.message))
    if placement.reason == reasons.MOVING:
        fleet["cluster"] = placement.cluster
        return fleet, (ConditionStatus.UNKNOWN, reasons.MOVING, _bounded(placement.message))
    cluster = placement.cluster
    fleet["cluster"] = cluster
    if not member_read:
        return fleet, (ConditionStatus.UNKNOWN, reasons.MEMBER_UNREACHABLE,
                       f"member {cluster} cannot be read: {member_problem or 'unknown'}; nothing is moved or deleted")
    if member_tenant is None:
        return fleet, (ConditionStatus.UNKNOWN, reasons.DELIVERING,
                       f"placed on {cluster}; waiting for Argo CD to deliver the tenant there")
    ready = ready_of(member_tenant)
    if ready is None:
        fleet["member"] = {}
        return fleet, (ConditionStatus.UNKNOWN, reasons.DELIVERING, f"{cluster}: its operator has not reported yet")
    status = ready.get("status") if ready.get("status") in {s.value for s in ConditionStatus} else "Unknown"
    reason = ready.get("reason") or reasons.MEMBER_STATUS
    fleet["member"] = {"ready": status, "reason": reason, "message": _bounded(str(ready.get("message", "")))}
    return fleet, (ConditionStatus(status), reason, _bounded(f"{cluster}: {ready.get('message', '')}"))


def _bounded(message: str) -> str:
    """As the condition keeps it (metav1.Condition's limit), so an unchanged one compares equal."""
    return message[:MAX_MESSAGE]


def tracked(member_tenant: dict, application: str) -> bool:
    """Whether the member's GpuTenant is the one the fleet's Application `application` delivered
    (Argo CD's tracking annotation names it): the hub shows and copies nothing of a same-named
    tenant someone else put there."""
    tracking = ((member_tenant.get("metadata") or {}).get("annotations") or {}).get(TRACKING_ANNOTATION, "")
    return tracking.startswith(f"{application}:")


def kubeconfig_objects(tenant: GpuTenant, config: OperatorConfig, operator_access: dict | None) -> list[dict]:
    """The hub namespace that holds the tenant's kubeconfig copies, the operator's own access there
    (`operator_access`, the chart's tenant-namespace role, as on a member), and the owners' Role on
    the copies."""
    namespace = naming.host_namespace(tenant.name, config)
    labels = naming.tenant_labels(tenant.name, COPIES_COMPONENT)
    rule = kubeconfig_secret_rule(tenant)
    objects: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
        **labels, "pod-security.kubernetes.io/enforce": "restricted"}}}]
    if operator_access is not None:
        objects.append(operator_access)
    if rule is None:
        return objects
    return [*objects,
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": naming.KUBECONFIGS_ROLE_NAME, "namespace": namespace, "labels": labels},
             "rules": [rule]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": naming.KUBECONFIGS_BINDING_NAME, "namespace": namespace, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": naming.KUBECONFIGS_ROLE_NAME},
             "subjects": owner_subjects(tenant)}]


def source_of(cluster: str, secret: dict) -> str:
    metadata = secret["metadata"]
    return f"{cluster}/{metadata.get('namespace')}/{metadata['name']}@{metadata.get('resourceVersion', '')}"


def kubeconfig_copy(tenant: str, config: OperatorConfig, cluster: str, secret: dict) -> dict:
    """The hub's copy of a member's kubeconfig Secret: its `config` key only."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret["metadata"]["name"], "namespace": naming.host_namespace(tenant, config),
                         "labels": {**naming.tenant_labels(tenant, COPIES_COMPONENT), COPIED_FROM_LABEL: cluster},
                         "annotations": {SOURCE_ANNOTATION: source_of(cluster, secret)}},
            "data": {"config": (secret.get("data") or {}).get("config", "")}}


def wanted_kubeconfigs(tenant: GpuTenant, member_tenant: dict | None) -> dict[str, str]:
    """Secret name -> its status entry, for the kubeconfigs the member issued that the hub copies:
    only the names the member would give the roles of the hub tenant's own spec, never a name the
    member tenant's status makes up (the hub reads those Secrets with the member's admin rights)."""
    roles = [role.value for role in tenant.spec.kubeconfig.roles] + (
        [naming.OIDC_KUBECONFIG_ROLE] if tenant.spec.vcluster.oidc else [])
    allowed = {naming.kubeconfig_secret_name(tenant.name, role) for role in roles}
    status = (member_tenant or {}).get("status") or {}
    return {entry["secretName"]: json.dumps(entry, sort_keys=True) for entry in status.get("kubeconfigs") or []
            if isinstance(entry, dict) and entry.get("secretName") in allowed}
