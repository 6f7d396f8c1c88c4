"""Kubeconfig credentials kept in memory: the inline certificates and key of a kubeconfig never
touch the disk (issue 17: the `kubernetes` package's loader wrote them to TMPDIR and removed them
only at a clean exit, so under churn and SIGKILL they piled up as private keys of every virtual
cluster's admin). `ssl` and kopf read them from an anonymous in-memory file (memfd)."""

from __future__ import annotations

import base64
import copy
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml


@dataclass(frozen=True)
class InlineCredentials:
    """PEM bytes a kubeconfig holds inline, kept in memory only."""

    ca: bytes | None = None
    client_certificate: bytes | None = None
    client_key: bytes | None = None


def split_inline_credentials(kubeconfig: dict, context: str | None = None) -> tuple[dict, InlineCredentials]:
    """The kubeconfig without the inline certificates and key of its current (or named) context,
    and those PEMs: what is left loads without the `kubernetes` package writing a file."""
    stripped = copy.deepcopy(kubeconfig)
    context_name = context or stripped.get("current-context")
    context_entry = _named(stripped, "contexts", context_name).get("context") or {}
    cluster = _named(stripped, "clusters", context_entry.get("cluster")).get("cluster") or {}
    user = _named(stripped, "users", context_entry.get("user")).get("user") or {}
    return stripped, InlineCredentials(
        ca=_pop_pem(cluster, "certificate-authority-data"),
        client_certificate=_pop_pem(user, "client-certificate-data"),
        client_key=_pop_pem(user, "client-key-data"))


def _named(kubeconfig: dict, section: str, name: str | None) -> dict:
    return next((entry for entry in kubeconfig.get(section) or []
                 if isinstance(entry, dict) and entry.get("name") == name), {})


def _pop_pem(entry: dict, key: str) -> bytes | None:
    data = entry.pop(key, None)
    if not data:
        return None
    try:
        return base64.standard_b64decode(data)
    except ValueError:
        raise kubernetes.config.ConfigException(f"kubeconfig {key} is not base64") from None


def read_kubeconfig_files(paths: list[Path]) -> tuple[dict, Path]:
    """kubeconfig files merged as kubectl merges $KUBECONFIG (the first file naming an entry or
    current-context wins), relative file references resolved against their own file's folder;
    returns the merged document and the first file's folder."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set] = {section: set() for section in merged}
    for path in paths:
        document = yaml.safe_load(path.read_text()) or {}
        if not isinstance(document, dict):
            raise kubernetes.config.ConfigException(f"{path} is not a kubeconfig (no YAML mapping)")
        if not merged.get("current-context"):
            merged["current-context"] = document.get("current-context")
        for section, inner, file_keys in (("clusters", "cluster", ("certificate-authority",)),
                                          ("users", "user", ("client-certificate", "client-key", "tokenFile")),
                                          ("contexts", "context", ())):
            for entry in document.get(section) or []:
                if entry.get("name") in seen[section]:
                    continue
                seen[section].add(entry.get("name"))
                body = dict(entry.get(inner) or {})
                for key in file_keys:
                    if body.get(key) and not os.path.isabs(body[key]):
                        body[key] = str(path.parent / body[key])
                merged[section].append({**entry, inner: body})
    return merged, paths[0].parent


def kubeconfig_source(path: str | None) -> str:
    """Which kubeconfig `kubeconfig_paths` reads, in words, for messages about a missing or
    unreachable cluster."""
    if path:
        return f"--kubeconfig {path}"
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        return f"$KUBECONFIG={listed}"
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else "the in-cluster service account"


def no_cluster_message(path: str | None, error: Exception) -> str:
    """One line for a kubeconfig that gives no cluster: what was tried, why not, what to do."""
    source = kubeconfig_source(path)
    if not path and not kubeconfig_paths(None):
        listed = os.environ.get("KUBECONFIG", "")
        tried = (f"$KUBECONFIG={listed} names no existing file" if listed else
                 f"$KUBECONFIG is unset, {Path.home() / '.kube' / 'config'} does not exist")
        return (f"no cluster: {tried} and this is not a pod in a cluster; pass --kubeconfig FILE or set "
                "KUBECONFIG to your cluster's kubeconfig")
    reason = " ".join(str(error).split()) or type(error).__name__
    return f"no cluster: cannot load the kubeconfig ({source}): {reason}; pass --kubeconfig FILE with a valid kubeconfig"


def kubeconfig_paths(path: str | None) -> list[Path]:
    """--kubeconfig, else $KUBECONFIG's existing files, else ~/.kube/config if it exists."""
    if path:
        if not os.path.isfile(path):
            raise kubernetes.config.ConfigException(f"{path} is not a file")
        return [Path(path)]
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = listed or [Path.home() / ".kube" / "config"]
    return [p for p in candidates if p.is_file()]


def memory_file(pem: bytes) -> int:
    """An anonymous in-memory file (memfd) holding `pem`; its path is /proc/self/fd/<fd>."""
    fd = os.memfd_create("kube-client-credentials", os.MFD_CLOEXEC)
    with os.fdopen(os.dup(fd), "wb") as memory_file:
        memory_file.write(pem)
    return fd


@contextmanager
def _private_pem_path(pem: bytes) -> Iterator[str]:
    """A path `ssl` can read the PEM from, which no other process can open and which is gone
    when the block ends: an anonymous in-memory file (memfd, Linux), else a file in a fresh 0700
    folder unlinked right after the read."""
    if hasattr(os, "memfd_create"):
        fd = memory_file(pem)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    folder = tempfile.mkdtemp(prefix="kube-client-")
    path = os.path.join(folder, "credentials.pem")
    try:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as private_file:
            private_file.write(pem)
        yield path
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(folder)


def tls_context(configuration: kubernetes.client.Configuration,
                credentials: InlineCredentials) -> ssl.SSLContext | bool:
    """The TLS context for a loaded configuration plus the inline PEMs kept in memory."""
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert,
        cadata=credentials.ca.decode() if credentials.ca else None)
    if credentials.client_certificate and credentials.client_key:
        with _private_pem_path(credentials.client_certificate + b"\n" + credentials.client_key) as path:
            context.load_cert_chain(path)
    elif configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context
