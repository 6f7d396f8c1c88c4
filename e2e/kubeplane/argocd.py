"""Argo CD (github.com/argoproj/argo-cd/v3, the version tools/versions.env pins, built by
`make tools` with the other tools) as host processes against a plane, reading a Git repository that
`git daemon` serves on loopback (kubeplane.git_server).

What a GitOps loop needs runs, each with the flags its Deployment in Argo CD's install manifest
would give it, on free loopback ports: Debian's redis (the manifest cache), the repo server
(renders the Git repository with Debian's git and the pinned helm) and the application controller
(compares, syncs, prunes and reports health), plus the ApplicationSet controller (cluster
generator). No API server and no UI: nothing here needs them (applications are Kubernetes
objects), and the build carries no UI assets. Its CRDs come from the module cache, never copied.

Settings are the install's minimum: `argocd-cm` with the GpuTenant health check
(operator/gputenant/argocd/health.lua, installed as docs/argocd.md says), `argocd-secret`, and the
`default` AppProject that Argo CD's API server would otherwise create.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any, cast

import kubernetes
from kubernetes.client.rest import ApiException

from gputenant.argocd import health_lua

from .components import start_component
from .fixtures import ARGOCD_NAMESPACE, install_crds
from .git_server import GitServer, accepts_connections
from .plane import ControlPlane
from .process import Process, free_ports, wait_until_serving
from .tools import REPO_ROOT, pinned_versions, require_tools, versions_file

MODULE = "github.com/argoproj/argo-cd/v3"
TOOLS_MODULE_DIR = REPO_ROOT / "tools" / "argocd"
GO_TOOLCHAIN = versions_file()["GO127_TOOLCHAIN"]
"""Argo CD v3.6 needs Go 1.27; the go command fetches this toolchain from the module proxy."""
CRDS = ("application-crd.yaml", "applicationset-crd.yaml", "appproject-crd.yaml")
PART_OF = {"app.kubernetes.io/part-of": "argocd"}
"""Argo CD reads only the settings ConfigMaps and Secrets carrying this label."""
RESYNC_SECONDS = 10
"""How often the controller compares every Application with Git (the install's 120 s is for
production; tests also ask for a refresh after each commit, as a Git webhook would)."""
GROUP, VERSION = "argoproj.io", "v1alpha1"


def argocd_binary() -> Path:
    """The Argo CD binary `make tools` built (ToolsMissing, naming the command, when it did not)."""
    return require_tools() / "argocd"


def module_dir() -> Path:
    """The pinned argo-cd module in the Go module cache (downloaded through the proxy if absent)."""
    result = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{pinned_versions()['argocd']}"],
                            cwd=TOOLS_MODULE_DIR, capture_output=True, text=True, check=True,
                            env={**os.environ, "GOTOOLCHAIN": GO_TOOLCHAIN})
    return Path(json.loads(result.stdout)["Dir"])


def settings(namespace: str) -> list[dict]:
    """argocd-cm (the GpuTenant health check), argocd-secret and the `default` AppProject."""
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "argocd-cm", "namespace": namespace, "labels": PART_OF},
         "data": {"resource.customizations.health.gputenant.io_GpuTenant": health_lua()}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "argocd-secret", "namespace": namespace, "labels": PART_OF},
         "stringData": {"server.secretkey": secrets.token_urlsafe(32)}},
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AppProject",
         "metadata": {"name": "default", "namespace": namespace},
         "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                  "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}},
    ]


class ArgoCD:
    """`ArgoCD(directory).start(plane)`, then `stop()`. `git` is the repository it reads."""

    def __init__(self, directory: Path, namespace: str = ARGOCD_NAMESPACE):
        self.directory = directory
        self.namespace = namespace
        self.git = GitServer(directory / "git", "platform")
        self._processes: list[Process] = []
        self._plane: ControlPlane | None = None

    def start(self, plane: ControlPlane) -> ArgoCD:
        binary = argocd_binary()
        self._plane = plane
        crds = module_dir() / "manifests" / "crds"
        for name in CRDS:
            install_crds(plane, crds / name)
        if not plane.kubectl("get", "namespace", self.namespace, "--ignore-not-found", "-o", "name").stdout.strip():
            plane.create_namespace(self.namespace)
        plane.kubectl("apply", "--server-side", "--field-manager=kubeplane-argocd", "-f", "-",
                      input=json.dumps({"apiVersion": "v1", "kind": "List", "items": settings(self.namespace)}))
        try:
            self.git.start(plane.log_dir)
            self._start_components(plane, binary)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_components(self, plane: ControlPlane, binary: Path) -> None:
        home = self.directory / "home"
        home.mkdir(parents=True, exist_ok=True)
        scripts = self._signature_script()
        # git and helm for the repo server; a HOME and TMPDIR of its own for their files; the
        # in-cluster destination (https://kubernetes.default.svc) through KUBECONFIG, upstream's
        # switch for running outside a pod (it would read a ServiceAccount's mounted token)
        env = {"PATH": f"{scripts}:{plane.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
               "TMPDIR": str(home), "ARGOCD_GPG_ENABLED": "false", "ARGOCD_FAKE_IN_CLUSTER": "true"}
        namespace = f"--namespace={self.namespace}"
        [redis] = free_ports(1)
        self._processes.append(Process("redis", [
            "redis-server", "--bind", "127.0.0.1", "--port", str(redis), "--save", "", "--appendonly", "no",
            "--dir", str(home)], plane.log_dir / "redis.log"))
        wait_until_serving(self._processes[-1], lambda: accepts_connections(redis), f"redis on port {redis}")
        cache = f"--redis=127.0.0.1:{redis}"
        repo, repo_metrics = free_ports(2)
        self._run(plane, binary, "argocd-repo-server", env, [
            "--address=127.0.0.1", f"--port={repo}", "--metrics-address=127.0.0.1", f"--metrics-port={repo_metrics}",
            "--disable-tls", "--client-ca-path=", cache], repo_metrics, "/healthz")
        repo_server = [f"--repo-server=127.0.0.1:{repo}", "--repo-server-plaintext"]
        [controller_metrics] = free_ports(1)
        self._run(plane, binary, "argocd-application-controller", env, [
            namespace, *repo_server, cache, f"--metrics-port={controller_metrics}",
            f"--app-resync={RESYNC_SECONDS}", "--app-resync-jitter=0",
            # each resource's health in the Application's status (Argo CD 3 keeps it only in redis
            # for the API server by default; here the tests read it from the object)
            "--persist-resource-health=true"], controller_metrics, "/healthz")
        appset_metrics, probe, webhook = free_ports(3)
        self._run(plane, binary, "argocd-applicationset-controller", env, [
            namespace, f"--argocd-repo-server=127.0.0.1:{repo}", "--repo-server-plaintext",
            f"--metrics-addr=127.0.0.1:{appset_metrics}", f"--probe-addr=127.0.0.1:{probe}",
            f"--webhook-addr=127.0.0.1:{webhook}", "--enable-scm-providers=false"], appset_metrics, "/metrics")

    def _signature_script(self) -> Path:
        """A directory with `git-verify-wrapper.sh`, which the repo server runs for every revision
        (its image installs the module's hack/git-verify-wrapper.sh; without it every manifest
        request fails with "permission denied"). The module cache's copy is not executable, so
        a one-line launcher runs it there with sh."""
        scripts = self.directory / "bin"
        scripts.mkdir(parents=True, exist_ok=True)
        launcher = scripts / "git-verify-wrapper.sh"
        launcher.write_text(f'#!/bin/sh\nexec sh {module_dir() / "hack" / "git-verify-wrapper.sh"} "$@"\n')
        launcher.chmod(0o755)
        return scripts

    def _run(self, plane: ControlPlane, binary: Path, component: str, env: dict[str, str], args: list[str],
             ready_port: int, ready_path: str) -> None:
        """One component of the multi-call binary, chosen by ARGOCD_BINARY_NAME."""
        self._processes.append(start_component(plane, component, binary, args, ready_port=ready_port,
                                               ready_path=ready_path,
                                               env={**env, "ARGOCD_BINARY_NAME": component}))

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        self.git.stop()

    def how_to_use(self) -> str:
        """What `make dev DEV_ARGS=--argocd` prints: there is no Argo CD API server or UI here, its
        API is the Application objects (and the Git repository it reads)."""
        assert self._plane is not None
        return "\n".join([
            f"Argo CD {pinned_versions()['argocd']} runs in namespace {self.namespace} (application controller, repo "
            "server, ApplicationSet controller; no API server or UI: its API is the Kubernetes objects).",
            f"  Git repository it reads: {self.git.url} (commit and push in {self.git.clone})",
            f"  export KUBECONFIG={self._plane.kubeconfig_path}",
            f"  kubectl -n {self.namespace} apply -f examples/argocd/apps/tenants.yaml   # after setting "
            f"repoURL: {self.git.url}, path: tenants",
            f"  kubectl -n {self.namespace} get applications -o wide",
            f"  logs: {self._plane.log_dir}/argocd-*.log",
        ])

    def apply(self, *objects: dict) -> None:
        """Server-side apply Applications or ApplicationSets (into Argo CD's namespace)."""
        assert self._plane is not None
        for obj in objects:
            obj.setdefault("metadata", {})["namespace"] = self.namespace
        self._plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))

    def application(self, name: str) -> dict | None:
        assert self._plane is not None
        with self._plane.api_client() as client:
            try:
                return cast(dict[str, Any], kubernetes.client.CustomObjectsApi(client).get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "applications", name))
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        """Annotate the Application `name`, e.g. `argocd.argoproj.io/refresh: hard` after a commit
        (what a Git webhook asks for) or `argocd.argoproj.io/deletion-approved`."""
        assert self._plane is not None
        self._plane.kubectl("annotate", "--overwrite", "-n", self.namespace, "applications.argoproj.io", name,
                            *(f"{key}={value}" for key, value in annotations.items()))

    def refresh(self, name: str) -> None:
        self.annotate(name, {"argocd.argoproj.io/refresh": "hard"})
