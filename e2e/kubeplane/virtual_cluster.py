"""A tenant's view of its REAL virtual cluster: kubectl with the admin kubeconfig the operator issued,
from the host, as the tenant works (tests of what vCluster syncs back to the tenant)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from gputenant import naming

from .plane import ControlPlane

VIRTUAL_NAMESPACE = "default"


def issued_kubeconfig(plane: ControlPlane, tenant: str, host_namespace: str, path: Path, role: str = "admin") -> Path:
    """The kubeconfig the operator issued to `tenant` for `role` (a Secret in its host namespace), written
    to `path`."""
    secret = json.loads(plane.kubectl("get", "secret", naming.kubeconfig_secret_name(tenant, role),
                                      "-n", host_namespace, "-o", "json").stdout)
    path.write_bytes(base64.b64decode(secret["data"]["config"]))
    return path


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
