"""Personal logins through spec.vcluster.oidc: the owners' OIDC groups and users, prefixed as the
vCluster API server names them, bound inside the virtual cluster to the same ClusterRole as the
admin token kubeconfig; and the kubeconfig whose user runs kubelogin (``kubectl oidc-login``)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable

from gputenant import naming
from gputenant.api.hub import KubeconfigRole, Subject, SubjectKind, VClusterOIDC
from gputenant.kube import KubeClient
from gputenant.kubeconfigs.issue import ROLE_CLUSTER_ROLES

OIDC_ROLE = naming.OIDC_KUBECONFIG_ROLE
OIDC_OWNERS_BINDING = "gputenant-oidc-owners"
"""The ClusterRoleBinding inside the virtual cluster that makes the owners' OIDC identities admins."""
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_VERSION = f"{RBAC_GROUP}/v1"


def oidc_owner_subjects(owners: Iterable[Subject], oidc: VClusterOIDC) -> list[dict]:
    """Each User and Group owner as the vCluster API server names the same identity from a token
    (prefix + claim value). ServiceAccount owners are host identities no issuer vouches for: they
    keep the token kubeconfigs."""
    prefixes = {SubjectKind.USER: oidc.username_prefix, SubjectKind.GROUP: oidc.groups_prefix}
    return [{"kind": owner.kind.value, "apiGroup": RBAC_GROUP, "name": prefixes[owner.kind] + owner.name}
            for owner in owners if owner.kind in prefixes]


def oidc_owners_binding(owners: Iterable[Subject], oidc: VClusterOIDC | None) -> dict | None:
    """The binding of the owners' OIDC identities to the admin role's ClusterRole; None without
    spec.vcluster.oidc or without a User or Group owner (then nobody is bound)."""
    subjects = oidc_owner_subjects(owners, oidc) if oidc else []
    if not subjects:
        return None
    return {"apiVersion": RBAC_VERSION, "kind": "ClusterRoleBinding",
            "metadata": {"name": OIDC_OWNERS_BINDING, "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY}},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole",
                        "name": ROLE_CLUSTER_ROLES[KubeconfigRole.ADMIN.value]},
            "subjects": subjects}


def binding_hash(binding: dict | None) -> str:
    """What the tenant's status records of the binding last put in place ('' for none), so the
    operator writes inside the virtual cluster only when the owners or the prefixes changed."""
    if binding is None:
        return ""
    return hashlib.sha256(json.dumps(binding, sort_keys=True).encode()).hexdigest()[:16]


async def put_oidc_owners_binding(client: KubeClient, binding: dict | None) -> None:
    """Server-side apply the binding, or delete it (absent is fine) when there is none."""
    if binding is None:
        await client.delete(RBAC_VERSION, "ClusterRoleBinding", OIDC_OWNERS_BINDING)
    else:
        await client.apply(binding)


def oidc_kubeconfig(context_name: str, server: str, ca_data: str, oidc: VClusterOIDC) -> dict:
    """A kubeconfig for a person: the vCluster's server and CA, and a user that gets its ID token
    from the issuer through kubelogin's exec plugin (``kubectl oidc-login get-token``), which
    caches and refreshes it. The issuer's CA goes along when the spec names one; scopes that make an
issuer put groups into the token are the issuer's own, so the tenant adds them (--oidc-extra-scope)."""
    args = ["oidc-login", "get-token", f"--oidc-issuer-url={oidc.issuer_url}", f"--oidc-client-id={oidc.client_id}"]
    if oidc.ca_bundle:
        args.append(f"--certificate-authority-data={base64.b64encode(oidc.ca_bundle.encode()).decode()}")
    user = f"{context_name}-oidc"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context_name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kubectl",
            "args": args,
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": False,
        }}}],
        "contexts": [{"name": user, "context": {"cluster": context_name, "user": user}}],
        "current-context": user,
    }
