"""Issue kubeconfigs inside a virtual cluster with the admin credentials vCluster wrote.

Tenants never get vCluster's admin client certificate: it cannot be revoked and never expires.
They get a ServiceAccount token from the TokenRequest API instead, bound to an expiry, which the
operator re-issues at 80% of its lifetime (or when ``gputenant.io/rotate-kubeconfigs`` changes).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

import yaml

from gputenant import naming
from gputenant.api.hub import KubeconfigRole
from gputenant.kube import ApiError, KubeClient
from gputenant.timefmt import parse_rfc3339, rfc3339

ARGOCD_ROLE = "argocd"
"""Argo CD's own ServiceAccount in the virtual cluster, cluster-admin like the ``argocd-manager``
that ``argocd cluster add`` creates; never a tenant's kubeconfig."""
ROLE_CLUSTER_ROLES = {KubeconfigRole.ADMIN.value: "cluster-admin", KubeconfigRole.VIEW.value: "view",
                      ARGOCD_ROLE: "cluster-admin"}
"""The virtual cluster's ClusterRole each kubeconfig role is bound to."""
SERVICE_ACCOUNT_NAMESPACE = "kube-system"
ROTATE_AFTER_FRACTION = 0.8
MIN_TOKEN_SECONDS = 600
"""The TokenRequest API refuses shorter expirations."""
T = TypeVar("T")
ANSWER_SECONDS = 5.0
"""How long `unanswered` waits for the virtual cluster's API (a hung one would hold the pass)."""


@dataclass(frozen=True)
class IssuedKubeconfig:
    role: str
    kubeconfig_yaml: str
    expires_at: datetime
    """When the token expires, as the API server granted it (timezone-aware, UTC)."""


class KubeconfigIssueError(Exception):
    """The virtual cluster refused or did not answer. ``transient`` failures (unreachable, 5xx,
    429) are worth retrying; others need a change (credentials, RBAC, input)."""

    def __init__(self, message: str, *, transient: bool):
        super().__init__(message)
        self.message = message
        self.transient = transient


def service_account_name(role: str) -> str:
    return f"gputenant-{role}"


def rotation_due(expires_at: datetime, lifetime: timedelta) -> datetime:
    """When a token expiring at `expires_at` falls due: once 80% of its lifetime has passed."""
    return expires_at - lifetime * (1 - ROTATE_AFTER_FRACTION)


def needs_rotation(expires_at: datetime | None, now: datetime, lifetime: timedelta) -> bool:
    """True once 80% of the token's lifetime has passed (or there is no expiry on record), so a
    new kubeconfig is in place well before the old one stops working."""
    if expires_at is None:
        return True
    return now >= rotation_due(expires_at, lifetime)


def kubeconfig_secret(tenant: str, role: str, namespace: str, issued: IssuedKubeconfig) -> dict:
    """The host Secret holding one issued kubeconfig (key ``config``), labelled as the tenant's,
    its expiry in an annotation so rotation needs no token parsing."""
    secret = kubeconfig_secret_of(tenant, role, namespace, issued.kubeconfig_yaml)
    secret["metadata"]["annotations"] = {naming.KUBECONFIG_EXPIRES_ANNOTATION: rfc3339(issued.expires_at)}
    return secret


def kubeconfig_secret_of(tenant: str, role: str, namespace: str, kubeconfig_yaml: str) -> dict:
    """The host Secret ``<tenant>-kubeconfig-<role>`` holding a kubeconfig (key ``config``), labelled
    as the tenant's; owners may read it (render.tenant.kubeconfig_secret_rule)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": naming.kubeconfig_secret_name(tenant, role),
            "namespace": namespace,
            "labels": naming.tenant_labels(tenant, "kubeconfig"),
        },
        "data": {"config": base64.b64encode(kubeconfig_yaml.encode()).decode()},
    }


async def issue_kubeconfigs(admin_kubeconfig: dict, roles: Iterable[str | KubeconfigRole], token_seconds: int,
                            server_url: str | None, *, context_name: str = "vcluster",
                            field_manager: str = "gpu-tenant-operator",
                            revoke: Iterable[str] = ()) -> list[IssuedKubeconfig]:
    """One token kubeconfig per role, issued inside the virtual cluster ``admin_kubeconfig`` reaches.

    Server-side applies ServiceAccount ``kube-system/gputenant-<role>`` and ClusterRoleBinding
    ``gputenant-<role>`` (to cluster-admin or view), then requests a token valid ``token_seconds``.
    The kubeconfig points at ``server_url`` (the URL tenants use; None: the admin kubeconfig's)
    and trusts the vCluster CA from the admin kubeconfig. The ServiceAccounts of the roles in
    `revoke` are deleted first and made anew: a bound token names its ServiceAccount's uid, so every
    token issued before fails at once. Raises ValueError for bad input and
    KubeconfigIssueError when the virtual cluster fails.
    """
    role_names = _role_values(roles)
    if token_seconds < MIN_TOKEN_SECONDS:
        raise ValueError(f"token lifetime {token_seconds}s is below the API server's minimum of "
                         f"{MIN_TOKEN_SECONDS}s; set spec.kubeconfig.tokenLifetime to 10m or more")
    cluster = _current_cluster(admin_kubeconfig)
    ca_data = cluster.get("certificate-authority-data")
    if not ca_data:
        raise ValueError("the vCluster admin kubeconfig has no certificate-authority-data; tenants' kubeconfigs "
                         "need the vCluster CA, so do not set exportKubeConfig.insecure")
    server = server_url or cluster["server"]
    return await _issue(admin_kubeconfig, role_names, token_seconds, server, ca_data, context_name, field_manager,
                        set(revoke))


async def unanswered(admin_kubeconfig: dict, field_manager: str = "gpu-tenant-operator") -> str | None:
    """None when the virtual cluster answers what a tenant's first command asks (a namespace list)
    through the kubeconfig's server within ANSWER_SECONDS; otherwise why not."""
    try:
        async with KubeClient.from_kubeconfig_dict(admin_kubeconfig, field_manager) as client:
            await asyncio.wait_for(client.request("GET", "/api/v1/namespaces", params={"limit": "1"}),
                                   ANSWER_SECONDS)
    except TimeoutError:
        return f"no answer within {ANSWER_SECONDS:g} s"
    except ApiError as error:
        return f"unreachable: {error.message}" if error.status == 0 else f"answered {error.status} {error.reason}"
    except ValueError as error:
        return f"the admin kubeconfig is unusable: {error}"
    return None


def _role_values(roles: Iterable[str | KubeconfigRole]) -> list[str]:
    values = [role.value if isinstance(role, KubeconfigRole) else role for role in roles]
    for value in values:
        if value not in ROLE_CLUSTER_ROLES:
            raise ValueError(f"unknown kubeconfig role {value!r} in spec.kubeconfig.roles; use "
                             f"{' or '.join(role.value for role in KubeconfigRole)}")
    return values


def _current_cluster(config: dict) -> dict:
    try:
        contexts = {c["name"]: c["context"] for c in config["contexts"]}
        clusters = {c["name"]: c["cluster"] for c in config["clusters"]}
        return clusters[contexts[config["current-context"]]["cluster"]]
    except (KeyError, TypeError) as error:
        raise ValueError(f"the vCluster admin kubeconfig is incomplete (missing {error}); it should come "
                         "from the vc-<release> Secret's config key") from None


async def _issue(admin_kubeconfig: dict, roles: list[str], token_seconds: int, server: str, ca_data: str,
                 context_name: str, field_manager: str, revoke: set[str]) -> list[IssuedKubeconfig]:
    """Through the operator's own async client, closed before returning: the `kubernetes`
    package's generated API classes cost the operator about 20 MiB of resident memory once
    imported (docs/performance.md, hot spot 6), and a thread per call."""
    async def issue_all(client: KubeClient) -> list[IssuedKubeconfig]:
        return [await _issue_role(client, role, token_seconds, server, ca_data, context_name, role in revoke)
                for role in roles]

    return await in_virtual_cluster(admin_kubeconfig, field_manager, issue_all)


async def in_virtual_cluster(admin_kubeconfig: dict, field_manager: str,
                             work: Callable[[KubeClient], Awaitable[T]]) -> T:
    """`work` with a client of the virtual cluster, its API errors as KubeconfigIssueError."""
    try:
        async with KubeClient.from_kubeconfig_dict(admin_kubeconfig, field_manager) as client:
            return await work(client)
    except ApiError as error:
        if error.status == 0:
            raise KubeconfigIssueError(f"the virtual cluster is unreachable: {error.message}",
                                       transient=True) from None
        raise KubeconfigIssueError(f"the virtual cluster answered {error.status} {error.reason}: "
                                   f"{error.message[:300]}", transient=error.transient) from None


async def _issue_role(client: KubeClient, role: str, token_seconds: int, server: str, ca_data: str,
                      context_name: str, revoke: bool = False) -> IssuedKubeconfig:
    name = service_account_name(role)
    labels = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY}
    if revoke:
        await client.delete("v1", "ServiceAccount", name, SERVICE_ACCOUNT_NAMESPACE)
    await client.apply({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": SERVICE_ACCOUNT_NAMESPACE, "labels": labels},
    })
    await client.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE_CLUSTER_ROLES[role]},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SERVICE_ACCOUNT_NAMESPACE}],
    })
    granted = (await client.request_token(SERVICE_ACCOUNT_NAMESPACE, name, token_seconds))["status"]
    user = f"{context_name}-{role}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context_name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"token": granted["token"]}}],
        "contexts": [{"name": user, "context": {"cluster": context_name, "user": user}}],
        "current-context": user,
    }
    expires_at = parse_rfc3339(granted["expirationTimestamp"])
    if expires_at is None:
        raise KubeconfigIssueError(f"the virtual cluster granted a token with an unreadable expiry "
                                   f"{granted['expirationTimestamp']!r}", transient=False)
    return IssuedKubeconfig(role, yaml.safe_dump(config, sort_keys=False), expires_at)
