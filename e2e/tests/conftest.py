"""Runs the real operator (`gputenant run`, a subprocess) against the session's control plane.

No containers run here, so nothing would start the vCluster pod the Helm release asks for.
`VClusterStandIn` plays that pod's part and only that: when a tenant's release is deployed it
starts a second real kube-apiserver (kubeplane's virtual apiserver) and writes the admin
kubeconfig to ``vc-<release>``, as the vCluster syncer does. Everything else (Helm, the API
server, RBAC, quotas, garbage collection) is real.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import install_crds, install_kai_queue_crd

REPO_ROOT = Path(__file__).resolve().parents[2]
GPUTENANT = Path(sys.executable).parent / "gputenant"
LOCAL_CHART = REPO_ROOT / "charts" / "vcluster-local"


class VClusterStandIn:
    """Plays the vCluster pod of every deployed tenant release (see the module docstring)."""

    def __init__(self, plane: ControlPlane, prefix: str):
        self.plane = plane
        self.prefix = prefix
        self.started: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "VClusterStandIn":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            while not self._stop.wait(0.5):
                try:
                    self._serve(core)
                except kubernetes.client.ApiException:
                    continue

    def _serve(self, core) -> None:
        releases = core.list_secret_for_all_namespaces(label_selector="owner=helm,status=deployed").items
        for release_secret in releases:
            namespace = release_secret.metadata.namespace
            release = release_secret.metadata.labels["name"]
            if not namespace.startswith(self.prefix):
                continue
            if release not in self.started:
                self.started[release] = self.plane.start_virtual_apiserver(release)
            virtual = self.started[release]
            try:
                core.read_namespaced_secret(f"vc-{release}", namespace)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
                config = yaml.safe_dump(virtual.kubeconfig()).encode()
                core.create_namespaced_secret(namespace, kubernetes.client.V1Secret(
                    metadata=kubernetes.client.V1ObjectMeta(name=f"vc-{release}"),
                    data={"config": base64.b64encode(config).decode()}))


class OperatorProcess:
    """`gputenant run` as a subprocess, so tests can SIGKILL and restart it."""

    def __init__(self, plane: ControlPlane, config_path: Path, log_path: Path):
        self.plane = plane
        self.config_path = config_path
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> "OperatorProcess":
        env = {**self.plane.env(), "GPUTENANT_RESYNC_SECONDS": "5", "GPUTENANT_DELETION_RETRY_SECONDS": "3"}
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [str(GPUTENANT), "run", "--config", str(self.config_path),
             "--kubeconfig", str(self.plane.kubeconfig_path)],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def operator_config(plane: ControlPlane, tmp_path_factory) -> Path:
    """examples/config.yaml with the local vcluster chart (no network in tests)."""
    config = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    chart_version = yaml.safe_load((LOCAL_CHART / "Chart.yaml").read_text())["version"]
    config["vcluster"].update(localPath=str(LOCAL_CHART), version=chart_version)
    path = tmp_path_factory.mktemp("operator") / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="session")
def crds(plane: ControlPlane) -> None:
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(plane)


@pytest.fixture(scope="session")
def operator(plane: ControlPlane, crds, operator_config: Path):
    """The operator running against the plane, plus the vCluster pod stand-in."""
    running = OperatorProcess(plane, operator_config, plane.log_dir / "operator.log").start()
    prefix = yaml.safe_load(operator_config.read_text()).get("namespacePrefix", "tenant-")
    with VClusterStandIn(plane, prefix):
        yield running
        running.stop()


def tenant_manifest(name: str, trust: str, owner: str, gpus: float = 1, **spec) -> dict:
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": trust, "owners": [{"kind": "User", "name": owner}],
                     "gpu": {"quota": gpus}, **spec}}


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all(objects))


def tenant(plane: ControlPlane, name: str) -> dict | None:
    with plane.api_client() as client:
        try:
            return kubernetes.client.CustomObjectsApi(client).get_cluster_custom_object(
                "gputenant.io", "v1alpha1", "gputenants", name)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return None
            raise


def condition(body: dict | None, condition_type: str) -> dict:
    for found in ((body or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == condition_type:
            return found
    return {}


def wait_ready(plane: ControlPlane, operator: OperatorProcess, name: str, timeout: float = 120) -> dict:
    def ready():
        body = tenant(plane, name)
        ok = condition(body, "Ready").get("status") == "True" and \
            body["status"].get("observedGeneration") == body["metadata"]["generation"]
        return body if ok else None
    try:
        return wait_for(ready, timeout=timeout, interval=0.5, what=f"tenant {name} Ready")
    except TimeoutError:
        raise AssertionError(f"tenant {name} not Ready: {(tenant(plane, name) or {}).get('status')}\n"
                             f"operator log:\n{operator.log_tail()}") from None


class Tenants:
    """Helpers the operator tests share (a fixture, because test modules cannot import conftest)."""

    manifest = staticmethod(tenant_manifest)
    condition = staticmethod(condition)

    def __init__(self, plane: ControlPlane, operator: OperatorProcess):
        self.plane = plane
        self.operator = operator

    def apply(self, *objects: dict) -> None:
        apply(self.plane, *objects)

    def get(self, name: str) -> dict | None:
        return tenant(self.plane, name)

    def wait_ready(self, name: str, timeout: float = 120) -> dict:
        return wait_ready(self.plane, self.operator, name, timeout)


@pytest.fixture(scope="session")
def tenants_api(plane: ControlPlane, operator: OperatorProcess) -> Tenants:
    return Tenants(plane, operator)
