"""Which objects are the tenant's: the labels and ownerRef the operator puts on what it makes, and
the check that keeps it from taking over an object someone else made under the same name."""

from __future__ import annotations

from gputenant import GROUP, KIND, naming
from gputenant.reconcile.events import API_VERSION


def owner_reference(body: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def adopt(obj: dict, body: dict, host_namespace: str) -> dict:
    """Our labels and an ownerRef to the tenant, set explicitly (never copied from the tenant).

    Objects in other namespaces that the renderer did not label for this tenant are shared
    (e.g. one device-plugin ConfigMap for all tenants) and are left unowned.
    """
    tenant = body["metadata"]["name"]
    metadata = dict(obj.get("metadata") or {})
    labels = dict(metadata.get("labels") or {})
    namespace = metadata.get("namespace")
    ours = labels.get(naming.TENANT_LABEL, tenant) == tenant and namespace in (None, host_namespace)
    if not ours:
        return obj
    component = labels.get(naming.COMPONENT_LABEL) or obj["kind"].lower()
    metadata["labels"] = {**labels, **naming.tenant_labels(tenant, component)}
    others = [ref for ref in metadata.get("ownerReferences") or [] if ref.get("kind") != KIND]
    metadata["ownerReferences"] = [*others, owner_reference(body)]
    return {**obj, "metadata": metadata}


def tenant_owner_uid(obj: dict) -> str | None:
    """The uid of the GpuTenant that owns `obj`, or None when no GpuTenant does."""
    return next((ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []
                 if ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")), None)


def owned_by(live: dict | None, uid: str) -> bool:
    """Whether the live object is absent (free to create) or was made by the operator for the tenant
    with this uid. An object of the same name made by anyone else, or for an earlier tenant of the
    same name, is not taken over."""
    return live is None or tenant_owner_uid(live) == uid
