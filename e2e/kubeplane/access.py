"""What a plane offers the code that uses it, started or attached: the layout of its directory,
identities signed by its CA, API clients, kubectl and helm with the pinned tools, and its audit log.
ControlPlane (plane.py) adds the lifecycle."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import kubernetes

from . import audit
from .apiserver import APIServerFiles, https_status
from .audit import WRITE_VERBS
from .kubeconfig import file_stem, kubeconfig, write_kubeconfig
from .pki import CertificateAuthority
from .process import PlaneError, wait_for
from .tools import require_kube_tools, require_tools

WEBHOOK_METRIC = re.compile(
    r'^apiserver_admission_webhook_admission_duration_seconds_(sum|count)\{[^}]*name="([^"]+)"[^}]*\} (\S+)$')


class CommandError(subprocess.CalledProcessError):
    """A kubectl or helm call failed; unlike its base class, the message includes stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


class PlaneAccess:
    """The plane's files, identities, clients and audit log; everything but starting and stopping."""

    directory: Path
    audit: bool
    ports: dict[str, int]
    _ca: CertificateAuthority | None
    _bin_dir: Path | None
    _kube_bin_dir: Path | None
    _apiserver: APIServerFiles

    # -- layout -------------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin (system:masters) kubeconfig."""
        return self.directory / "kubeconfigs" / "admin.kubeconfig"

    @property
    def audit_log_path(self) -> Path:
        return self.log_dir / "audit.jsonl"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_pem(self) -> bytes:
        return self._apiserver.ca_cert.read_bytes()

    @property
    def bin_dir(self) -> Path:
        """Every pinned tool (etcd, helm, kwok, the vCluster's parts, ...) and the pinned Kubernetes
        binaries; the ones this plane runs are in kube_bin_dir."""
        if self._bin_dir is None:
            self._bin_dir = require_tools()
        return self._bin_dir

    @property
    def kube_bin_dir(self) -> Path:
        """The Kubernetes binaries of the version the harness runs (GPUTENANT_KUBE_VERSION, default
        the pin: kubeplane.tools.kube_version), for every component the plane starts and its kubectl."""
        if self._kube_bin_dir is None:
            self._kube_bin_dir = require_kube_tools()
        return self._kube_bin_dir

    @property
    def _pki_dir(self) -> Path:
        return self.directory / "pki"

    def _admin_get(self, path: str, user_agent: str = "kubeplane") -> int | None:
        return https_status(self.ports["apiserver"], path, self._apiserver.ca_cert,
                            self._apiserver.admin, user_agent)

    # -- identities ---------------------------------------------------------------------------

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            self._ca = CertificateAuthority.load(self._pki_dir / "ca.crt", self._pki_dir / "ca.key")
        return self._ca

    def user(self, name: str, groups: Iterable[str] = ()) -> Path:
        """A kubeconfig authenticating as `name` in `groups` by a client certificate.

        Certificates are signed on demand by the plane's CA, so new identities need no restart.
        """
        groups = list(groups)
        path = self.kubeconfig_path.parent / f"user-{file_stem('@'.join([name, *groups]))}.kubeconfig"
        if not path.exists():
            pair = self.ca.client_pair(name, groups)
            write_kubeconfig(path, kubeconfig(self.api_url, self.ca_pem, name,
                                              cert_pem=pair.cert_pem, key_pem=pair.key_pem))
        return path

    def kubeconfig_for_token(self, token: str, name: str) -> Path:
        """A kubeconfig presenting a bearer token, e.g. one from a TokenRequest."""
        path = self.kubeconfig_path.parent / f"token-{file_stem(name)}.kubeconfig"
        return write_kubeconfig(path, kubeconfig(self.api_url, self.ca_pem, name, token=token))

    # -- clients ------------------------------------------------------------------------------

    def api_client(self, kubeconfig_path: str | Path | None = None) -> kubernetes.client.ApiClient:
        """A `kubernetes` client for the admin or for any kubeconfig from user()/kubeconfig_for_token()."""
        return kubernetes.config.new_client_from_config(
            config_file=str(kubeconfig_path or self.kubeconfig_path))

    def cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        """A cluster-scoped custom object as the admin sees it, or None when it does not exist
        (tests ask "is the GpuTenant/Queue still there?" more often than anything else)."""
        with self.api_client() as client:
            try:
                return cast(dict[str, Any], kubernetes.client.CustomObjectsApi(client).get_cluster_custom_object(
                    group, version, plural, name))
            except kubernetes.client.ApiException as error:
                if error.status == 404:
                    return None
                raise

    def env(self, kubeconfig_path: str | Path | None = None) -> dict[str, str]:
        """Environment for subprocesses: KUBECONFIG, the pinned tools first on PATH (the plane's
        Kubernetes version's kubectl before them), and helm's state inside the plane directory so
        the user's helm setup is neither used nor touched."""
        helm_home = self.directory / "helm"
        tools = dict.fromkeys([str(self.kube_bin_dir), str(self.bin_dir)])
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig_path or self.kubeconfig_path),
            "PATH": os.pathsep.join([*tools, os.environ.get("PATH", "")]),
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    def kubectl(self, *args: str, kubeconfig_path: str | Path | None = None, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
        return self._run("kubectl", args, kubeconfig_path, input, check)

    def helm(self, *args: str, kubeconfig_path: str | Path | None = None, input: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
        return self._run("helm", args, kubeconfig_path, input, check)

    def _run(self, tool: str, args, kubeconfig_path, input, check) -> subprocess.CompletedProcess:
        command = [str((self.kube_bin_dir if tool == "kubectl" else self.bin_dir) / tool), *args]
        result = subprocess.run(command, env=self.env(kubeconfig_path), input=input,
                                capture_output=True, text=True)
        if check and result.returncode:
            raise CommandError(result.returncode, command, result.stdout, result.stderr)
        return result

    def create_namespace(self, name: str, labels: dict[str, str] | None = None,
                         timeout: float = 30) -> kubernetes.client.V1Namespace:
        """Create a namespace and wait for its `default` ServiceAccount, without which the
        ServiceAccount admission plugin rejects every Pod in it."""
        with self.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            namespace = core.create_namespace(kubernetes.client.V1Namespace(
                metadata=kubernetes.client.V1ObjectMeta(name=name, labels=labels)))
            wait_for(lambda: core.list_namespaced_service_account(
                name, field_selector="metadata.name=default").items,
                timeout=timeout, what=f"ServiceAccount {name}/default")
        return namespace

    def admission_webhooks(self) -> dict[str, tuple[float, int]]:
        """Webhook name -> (seconds, calls) the API server has spent calling it, every operation and
        outcome together, from its own apiserver_admission_webhook_admission_duration_seconds."""
        totals: dict[str, list[float]] = {}
        for line in self.kubectl("get", "--raw", "/metrics").stdout.splitlines():
            match = WEBHOOK_METRIC.match(line)
            if match:
                kind, name, value = match.groups()
                totals.setdefault(name, [0.0, 0.0])[0 if kind == "sum" else 1] += float(value)
        return {name: (seconds, int(calls)) for name, (seconds, calls) in totals.items()}

    # -- audit log ----------------------------------------------------------------------------

    def audit_offset(self) -> int:
        """Where the audit log ends now; pass it as `since_offset` to count only later requests."""
        self._require_audit()
        return audit.log_size(self.audit_log_path)

    def audit_events(self, since_offset: int = 0) -> list[dict]:
        """Audit events since `since_offset`, including every request that completed before this call."""
        self._require_audit()
        marker = f"kubeplane-audit-sync/{uuid.uuid4()}"
        # A response can reach its client just before its audit event is written; a marker request
        # sent afterwards and found in the log proves every earlier event is there too.
        self._admin_get("/version", user_agent=marker)

        def events_up_to_marker() -> list[dict] | None:
            events = list(audit.read_events(self.audit_log_path, since_offset))
            for index, event in enumerate(events):
                if event.get("userAgent") == marker:
                    return events[:index] + events[index + 1:]
            return None
        return wait_for(events_up_to_marker, timeout=10, interval=0.02, what="the audit marker")

    def count_requests(self, since_offset: int = 0, verbs: Iterable[str] | None = WRITE_VERBS,
                       user: str | None = None, user_agent: str | None = None) -> int:
        """How many requests since `since_offset` had one of `verbs` (None: any), came from
        `user` (exact username) and from a client whose User-Agent starts with `user_agent`."""
        wanted = None if verbs is None else set(verbs)
        return sum(audit.matches(event, wanted, user, user_agent)
                   for event in self.audit_events(since_offset))

    def _require_audit(self) -> None:
        if not self.audit:
            raise PlaneError("this plane was started without audit=True")
