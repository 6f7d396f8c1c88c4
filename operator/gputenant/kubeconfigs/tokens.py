"""Everything the operator reads from and writes on kubeconfig Secrets: the admin kubeconfig vCluster
writes to ``vc-<release>``, the server a kubeconfig points at, and the annotations that decide
when a token Secret (a tenant kubeconfig or the Argo CD cluster Secret) is issued again."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta

import yaml

from gputenant import GROUP, naming
from gputenant.kubeconfigs.issue import needs_rotation
from gputenant.timefmt import parse_duration, parse_rfc3339, rfc3339

ROTATION_ANNOTATION = f"{GROUP}/rotation"
"""On each token Secret: the rotate-kubeconfigs request it was issued for."""
SERVER_ANNOTATION = f"{GROUP}/server"
"""On each token Secret: the server URL it was issued for (a new URL re-issues it)."""
REVOCATION_ANNOTATION = f"{GROUP}/revocation"
"""On each token Secret: the revoke-kubeconfigs request it was issued after."""
REVOKED = "revoked"
"""Why a token is issued again after a revocation (its ServiceAccount is made anew)."""
MISSING = "missing"
"""Why a token is issued for the first time (no Secret, or one without data): no rotation."""
TOKEN_ANNOTATIONS = (naming.KUBECONFIG_EXPIRES_ANNOTATION, ROTATION_ANNOTATION, SERVER_ANNOTATION, REVOCATION_ANNOTATION)


def token_lifetime(text: str, field_name: str = "spec.kubeconfig.tokenLifetime") -> timedelta:
    """'24h', '90m', '1h30m' -> timedelta; ValueError naming the field otherwise."""
    lifetime = parse_duration(text)
    if lifetime is None:
        raise ValueError(f"{field_name}: {text!r} is not a duration; write e.g. 24h, 90m or 1h30m")
    return lifetime


def admin_kubeconfig(secret: dict | None) -> dict | None:
    """The admin kubeconfig vCluster wrote to its ``vc-<release>`` Secret (key ``config``), or None
    while the control plane has not written it yet. ValueError when it is no kubeconfig."""
    encoded = ((secret or {}).get("data") or {}).get("config")
    if not encoded:
        return None
    try:
        kubeconfig = yaml.safe_load(base64.b64decode(encoded))
    except (binascii.Error, yaml.YAMLError) as error:
        raise ValueError(str(error)) from None
    if not isinstance(kubeconfig, dict):
        raise ValueError("not a YAML mapping")
    return kubeconfig


def server_of(kubeconfig: dict) -> str | None:
    """The server URL of a kubeconfig's first cluster."""
    clusters = kubeconfig.get("clusters") or []
    return clusters[0]["cluster"]["server"] if clusters else None


def with_server(kubeconfig: dict, server: str) -> dict:
    """A copy of ``kubeconfig`` whose first cluster is dialled at ``server`` (same CA): the address
    the configured exposure reaches, where vCluster wrote its in-cluster Service name."""
    clusters = kubeconfig.get("clusters") or []
    if not clusters:
        return kubeconfig
    first = {**clusters[0], "cluster": {**clusters[0]["cluster"], "server": server}}
    return {**kubeconfig, "clusters": [first, *clusters[1:]]}


def https_server(address: str, port: int) -> str:
    """``https://<address>:<port>`` (a node port, a load balancer's port); an IPv6 address is bracketed."""
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}:{port}"


def ca_of(kubeconfig: dict) -> bytes:
    """The PEM CA bundle of a kubeconfig's first cluster."""
    return base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])


def token_of(kubeconfig_yaml: str) -> str:
    """The bearer token of an issued (token) kubeconfig."""
    return yaml.safe_load(kubeconfig_yaml)["users"][0]["user"]["token"]


def token_annotations(expires_at: datetime, rotation: str, server: str | None, revocation: str = "") -> dict[str, str]:
    """What a token Secret records about its issue, read back by `issue_reason`."""
    return {naming.KUBECONFIG_EXPIRES_ANNOTATION: rfc3339(expires_at), ROTATION_ANNOTATION: rotation,
            SERVER_ANNOTATION: server or "", REVOCATION_ANNOTATION: revocation}


def recorded_annotations(live: dict) -> dict[str, str]:
    """The token annotations of a live Secret, to carry over unchanged when no issue is due."""
    annotations = live["metadata"].get("annotations") or {}
    return {key: annotations.get(key, "") for key in TOKEN_ANNOTATIONS}


def issue_reason(live: dict | None, lifetime: timedelta, now: datetime, rotation: str,
                 server: str | None, revocation: str = "") -> str | None:
    """Why the token Secret `live` must be issued again, or None while it is still good:
    missing, revoked (the revoke annotation changed: its ServiceAccount is made anew), requested
    (the rotate annotation changed), server changed, or due (80% of the lifetime passed,
    `needs_rotation`; an unreadable expiry counts as due)."""
    if live is None or not (live.get("data") or {}):
        return MISSING
    annotations = live["metadata"].get("annotations") or {}
    if annotations.get(REVOCATION_ANNOTATION, "") != revocation:
        return REVOKED
    if annotations.get(ROTATION_ANNOTATION, "") != rotation:
        return "requested"
    if annotations.get(SERVER_ANNOTATION) != server:
        return "server changed"
    expires_at = parse_rfc3339(annotations.get(naming.KUBECONFIG_EXPIRES_ANNOTATION))
    return "due" if needs_rotation(expires_at, now, lifetime) else None
