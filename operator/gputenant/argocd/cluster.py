"""Register a tenant's virtual cluster with Argo CD declaratively (a labelled Secret in Argo CD's
namespace, as in Argo CD's "Declarative Setup: Clusters"), so Applications and ApplicationSets
can deploy into it without anyone running ``argocd cluster add``."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from gputenant import naming

CLUSTER_SECRET_TYPE_LABEL = "argocd.argoproj.io/secret-type"
HEALTH_LUA_PATH = Path(__file__).with_name("health.lua")
"""Argo CD health check for gputenant.io/GpuTenant; see docs/argocd.md for installing it."""


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def cluster_secret(tenant: str, namespace: str, server_url: str, ca: bytes | str, token: str,
                   *, project: str | None = None) -> dict:
    """The Argo CD cluster Secret for a tenant's vCluster.

    ``namespace`` is Argo CD's namespace, ``ca`` the vCluster CA in PEM, ``token`` a bearer token
    valid inside the virtual cluster (the tenant's admin kubeconfig token; rotate this Secret with
    it). ``project`` makes it a project-scoped cluster. The tenant labels on the Secret become
    Argo CD cluster labels, so an ApplicationSet cluster generator can select tenants by them.
    """
    config = {"bearerToken": token, "tlsClientConfig": {"insecure": False, "caData": _b64(ca)}}
    name = naming.argocd_secret_name(tenant)
    data = {"name": name, "server": server_url, "config": json.dumps(config, sort_keys=True)}
    if project:
        data["project"] = project
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {CLUSTER_SECRET_TYPE_LABEL: "cluster", **naming.tenant_labels(tenant, "argocd")},
        },
        "data": {key: _b64(value) for key, value in data.items()},
    }


def bearer_token_of(secret: dict) -> str:
    """The bearer token in a live cluster Secret written by `cluster_secret`."""
    return json.loads(base64.b64decode(secret["data"]["config"]))["bearerToken"]


def health_lua() -> str:
    return HEALTH_LUA_PATH.read_text()
