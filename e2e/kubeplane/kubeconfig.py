"""Self-contained kubeconfig files (credentials inline), so a path can be handed to any tool."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(server: str, ca_pem: bytes, name: str, *, cert_pem: bytes | None = None,
               key_pem: bytes | None = None, token: str | None = None) -> dict:
    """A kubeconfig with one cluster, one user and one context, all called `name`."""
    if token:
        user = {"token": token}
    elif cert_pem and key_pem:
        user = {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}
    else:
        raise ValueError(f"kubeconfig {name}: give a token or both cert_pem and key_pem")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def write_kubeconfig(path: Path, config: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def file_stem(name: str) -> str:
    """A file-name-safe form of an identity such as `system:serviceaccount:ns:sa`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
