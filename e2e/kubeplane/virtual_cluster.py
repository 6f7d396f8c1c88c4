"""A tenant's view of its REAL virtual cluster: kubectl with the admin kubeconfig the operator issued,
from the host, as the tenant works (tests of what vCluster syncs back to the tenant)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import yaml

from gputenant import naming
from gputenant.render.tenant_view import VIEW_KEY, VIRTUAL_NAME
from gputenant.render.tenant_view import VIRTUAL_NAMESPACE as VIEW_NAMESPACE

from .plane import ControlPlane
from .process import wait_for

VIRTUAL_NAMESPACE = "default"
HOST_NAME_ANNOTATION = "vcluster.loft.sh/object-name"
"""vCluster's annotation on a synced host object: the virtual object's name."""


def issued_kubeconfig(plane: ControlPlane, tenant: str, host_namespace: str, path: Path, role: str = "admin") -> Path:
    """The kubeconfig the operator issued to `tenant` for `role` (a Secret in its host namespace), written
    to `path`."""
    secret = json.loads(plane.kubectl("get", "secret", naming.kubeconfig_secret_name(tenant, role),
                                      "-n", host_namespace, "-o", "json").stdout)
    path.write_bytes(base64.b64decode(secret["data"]["config"]))
    return path


def kubeconfig_server(kubectl: list[str]) -> str:
    """The server an issued kubeconfig names; `kubectl` is the command line with it
    (``[kubectl, "--kubeconfig=..."]``)."""
    return subprocess.run([*kubectl, "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"],
                          capture_output=True, text=True, timeout=60, check=True).stdout


def namespaces_through(kubectl: list[str]) -> set[str]:
    """The virtual cluster's namespaces (``namespace/<name>``), listed from the host through an issued
    kubeconfig: its server answers there and its CA checks the certificate it presents."""
    return set(subprocess.run([*kubectl, "get", "namespaces", "-o", "name"], capture_output=True, text=True,
                              timeout=60, check=True).stdout.split())


def synced_host_pods(plane: ControlPlane, host_namespace: str, virtual_name: str) -> list[dict]:
    """The host pods vCluster synced from the virtual pod `virtual_name` (one, once synced), as the
    platform reads them."""
    listed = json.loads(plane.kubectl("get", "pods", "-n", host_namespace, "-o", "json").stdout)["items"]
    return [pod for pod in listed if (pod["metadata"].get("annotations") or {}).get(HOST_NAME_ANNOTATION) == virtual_name]


class VirtualCluster:
    """kubectl against the tenant's virtual cluster with the admin kubeconfig the operator issued."""

    def __init__(self, plane: ControlPlane, kubeconfig: Path):
        self.plane = plane
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, input: str | None = None, check: bool = True):
        return self.plane.kubectl(*args, kubeconfig_path=self.kubeconfig, input=input, check=check)

    def apply(self, manifest: dict, check: bool = True):
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=check)

    def pod(self, name: str) -> dict | None:
        found = self.kubectl("get", "pod", name, "-n", VIRTUAL_NAMESPACE, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def job_pods(self, job: str) -> list[dict]:
        return json.loads(self.kubectl("get", "pods", "-n", VIRTUAL_NAMESPACE, "-l", f"job-name={job}",
                                       "-o", "json").stdout)["items"]

    def events(self, pod: str) -> list[dict]:
        """Events about the virtual pod, as `kubectl describe pod` shows them to the tenant."""
        return json.loads(self.kubectl("get", "events", "-n", VIRTUAL_NAMESPACE, "--field-selector",
                                       f"involvedObject.kind=Pod,involvedObject.name={pod}",
                                       "-o", "json").stdout)["items"]

    def describe(self, pod: str) -> str:
        return self.kubectl("describe", "pod", pod, "-n", VIRTUAL_NAMESPACE, check=False).stdout

    def sync_errors(self, pod: str) -> list[str]:
        """What vCluster's pod syncer tells the tenant when the host refuses its pod: a Warning event
        `SyncError` on the virtual pod (`kubectl describe pod`), quoting the host's refusal."""
        return [event["message"] for event in self.events(pod) if event.get("reason") == "SyncError"]

    def refusal_seen(self, pod: str, expected: str, timeout: float = 180) -> str:
        """The SyncError on `pod` that quotes `expected`, once the tenant can see it."""
        def seen():
            return next((message for message in self.sync_errors(pod) if expected in message), None)
        try:
            return wait_for(seen, timeout=timeout, interval=1, what=f"{expected!r} on virtual pod {pod}")
        except TimeoutError:
            raise AssertionError(self.describe(pod)) from None

    def wait_pending_event(self, pod: str, reason: str, timeout: float = 180) -> None:
        """A GpuPodPending event on the virtual pod saying `reason`. The operator posts one each time
        the reason changes: on busy cores an earlier one ("waiting for the scheduler") may come first."""
        def told() -> list[str] | None:
            messages = [e["message"] for e in self.events(pod) if e.get("reason") == "GpuPodPending"]
            return messages if reason in messages else None
        try:
            wait_for(told, timeout=timeout, interval=1, what=f"the GpuPodPending event on {pod}")
        except TimeoutError:
            raise AssertionError(f"no GpuPodPending event on {pod} says {reason!r}: {self.describe(pod)}") from None

    def view_configmap(self) -> dict | None:
        """The tenant's view (render/tenant_view.py) where the syncer shows it inside
        (kube-public/gputenant), if it does."""
        found = self.kubectl("get", "configmap", VIRTUAL_NAME, "-n", VIEW_NAMESPACE, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def view(self) -> dict:
        """The view's view.json inside; empty while it is not there."""
        return json.loads((self.view_configmap() or {}).get("data", {}).get(VIEW_KEY) or "{}")

    def wait_view(self, holds, what: str, timeout: float = 180) -> dict:
        """The view once `holds(view)`; the assertion quotes the view last seen. The default: a
        virtual pod through the syncer, the guard and KAI and its status back, on busy cores."""
        try:
            return wait_for(lambda: (view := self.view()) and holds(view) and view, timeout=timeout, interval=1,
                            what=what)
        except TimeoutError:
            raise AssertionError(f"{what}; the view inside: {json.dumps(self.view(), indent=1)}") from None

    def gputenant_status(self, *args: str) -> str:
        """`gputenant status` as the tenant runs it: with its vCluster kubeconfig only."""
        done = subprocess.run([sys.executable, "-m", "gputenant.cli", "status", f"--kubeconfig={self.kubeconfig}",
                               *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout
