"""Runs the real operator (`gputenant run`, a subprocess) against the session's control plane.

No containers run here, so nothing would start the vCluster pod the Helm release asks for.
`kubeplane.vcluster_sim.VClusterSimulator` plays that pod's part, and only that: once the real
statefulset controller has created the chart's Pod, it starts a second real kube-apiserver for
the release and writes the admin kubeconfig to ``vc-<release>`` as vCluster's syncer does.
Everything else (Helm, the API server, RBAC, quotas, garbage collection) is real.

The operator serves its admission guard (`--webhook-host 127.0.0.1`, a free loopback port,
generated certificates), so every tenant pod, the vCluster control-plane pod included, is admitted
through it as in production; the webhook configurations are removed when the operator stops, so
later modules do not meet a guard that no longer answers (it fails closed).

The operator authenticates as its own user, ``gpu-tenant-operator`` (in system:masters here; the
chart's RBAC is exercised by test_chart_install.py), so the audit log tells its requests apart
from the tests', the simulator's and the controllers'.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant.config.models import OperatorConfig
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import ARGOCD_NAMESPACE, REAL_VCLUSTER_CHART, install_crds, install_kai_queue_crd
from kubeplane.gpu_nodes import create_nodes, pool_nodes
from kubeplane.kai import KaiScheduler
from kubeplane.kai_fixtures import KaiCluster
from kubeplane.kwok import Kwok
from kubeplane.pytest_plugin import kwok  # noqa: F401 (fixture: kwok on the session plane, for simulated GPU nodes)
from kubeplane.storage import LocalPathProvisioner
from kubeplane.vcluster_images import vcluster_images
from kubeplane.vcluster_sim import VClusterSimulator

REPO_ROOT = Path(__file__).resolve().parents[2]
GPUTENANT = Path(sys.executable).parent / "gputenant"
LOCAL_CHART = REPO_ROOT / "charts" / "vcluster-local"
OPERATOR_USER = "gpu-tenant-operator"
GUARD_CONFIGURATION = "gputenant-guard"
RESYNC_SECONDS = 5


class OperatorProcess:
    """`gputenant run` as a subprocess, so tests can SIGKILL and restart it."""

    def __init__(self, plane: ControlPlane, config_path: Path, log_path: Path, extra_args: Sequence[str] = ()):
        self.plane = plane
        self.config_path = config_path
        self.log_path = log_path
        self.extra_args = list(extra_args)
        """More `gputenant run` flags, e.g. the admission guard's --webhook-*."""
        self.user = OPERATOR_USER
        self.resync_seconds = RESYNC_SECONDS
        self.kubeconfig_path = plane.user(OPERATOR_USER, groups=["system:masters"])
        self.process: subprocess.Popen | None = None

    def start(self) -> OperatorProcess:
        env = {**self.plane.env(self.kubeconfig_path), "GPUTENANT_RESYNC_SECONDS": str(RESYNC_SECONDS),
               "GPUTENANT_DELETION_RETRY_SECONDS": "3"}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(GPUTENANT), "run", "--config", str(self.config_path),
                 "--kubeconfig", str(self.kubeconfig_path), *self.extra_args],
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


@pytest.fixture(scope="module")
def vcluster_simulator(plane: ControlPlane):
    """The simulated vCluster pod of every tenant release (see the module docstring). Per module,
    like the operator: other test modules run their own simulator on the same plane, and two
    simulating one StatefulSet would each start an apiserver for it."""
    with VClusterSimulator(plane) as simulator:
        yield simulator


def guard_flags(cert_dir: Path) -> list[str]:
    """`gputenant run` flags that serve the admission guard on a free loopback port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return ["--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--webhook-cert-dir", str(cert_dir)]


def remove_guard_configurations(plane: ControlPlane) -> None:
    with plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        for delete in (admission.delete_mutating_webhook_configuration,
                       admission.delete_validating_webhook_configuration):
            try:
                delete(GUARD_CONFIGURATION)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture(scope="module")
def operator(plane: ControlPlane, crds, operator_config: Path, vcluster_simulator: VClusterSimulator,
             tmp_path_factory):
    """The operator running against the plane with its admission guard, its tenants' vCluster pods
    simulated."""
    running = OperatorProcess(plane, operator_config, plane.log_dir / "operator.log",
                              extra_args=guard_flags(tmp_path_factory.mktemp("guard-certs"))).start()
    yield running
    running.stop()
    remove_guard_configurations(plane)


def tenant_manifest(name: str, trust: str, owner: str, gpus: float = 1, **spec) -> dict:
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": trust, "owners": [{"kind": "User", "name": owner}],
                     "gpu": {"quota": gpus}, **spec}}


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all(objects))


def tenant(plane: ControlPlane, name: str) -> dict | None:
    return plane.cluster_object("gputenant.io", "v1alpha1", "gputenants", name)


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
        self.applied: set[str] = set()

    def apply(self, *objects: dict) -> None:
        apply(self.plane, *objects)
        self.applied.update(obj["metadata"]["name"] for obj in objects if obj["kind"] == "GpuTenant")

    def delete_all(self, timeout: float = 300) -> None:
        """Delete every tenant this module applied and wait until the operator has offboarded
        them, so no vCluster StatefulSet outlives the module's simulator."""
        remaining = sorted(name for name in self.applied if self.get(name) is not None)
        for name in remaining:
            self.plane.kubectl("patch", "gputenant", name, "--type=merge", "-p", '{"spec":{"preventDeletion":false}}')
        if remaining:
            self.plane.kubectl("delete", "gputenant", *remaining, "--wait=false")
        try:
            wait_for(lambda: all(self.get(name) is None for name in remaining), timeout=timeout, interval=1,
                     what=f"tenants {remaining} to be deleted")
        except TimeoutError:
            left = [name for name in remaining if self.get(name) is not None]
            raise AssertionError(f"tenants not offboarded: {left}\noperator log:\n{self.operator.log_tail()}") from None

    def get(self, name: str) -> dict | None:
        return tenant(self.plane, name)

    def wait_ready(self, name: str, timeout: float = 120) -> dict:
        return wait_ready(self.plane, self.operator, name, timeout)


@pytest.fixture(scope="session")
def vcluster_node(node_plane: ControlPlane):
    """The node plane made ready for REAL vClusters: the project's vCluster images imported into
    the node's containerd, the GpuTenant and Queue CRDs, a default StorageClass backed by the real
    local-path-provisioner (the chart keeps vCluster's data on a claim) and Argo CD's namespace.
    The real node carries examples/config.yaml's cpuPool labels: it is the CPU node that tenant
    pods without GPUs are pinned to."""
    node_plane.node.containerd.import_images(list(vcluster_images(node_plane.bin_dir).values()))
    cpu_pool = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml").cpu_pool
    node_plane.kubectl("label", "node", node_plane.node.name, "--overwrite",
                       *(f"{key}={value}" for key, value in cpu_pool.node_selector.items()))
    install_crds(node_plane, REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(node_plane)
    node_plane.kubectl("create", "namespace", ARGOCD_NAMESPACE)
    provisioner = LocalPathProvisioner().start(node_plane)
    yield node_plane
    provisioner.stop()


@pytest.fixture(scope="session")
def vcluster_kai(vcluster_node: ControlPlane):
    """The node plane with the real KAI-Scheduler and SIMULATED GPU nodes (kwok) for every pool of
    examples/config.yaml, for tests whose tenants' GPU pods travel from a real vCluster through the
    guard into KAI. The real node stays the plane's CPU node."""
    config = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))
    node_kwok, kai = Kwok().start(vcluster_node), KaiScheduler()
    try:
        nodes = pool_nodes(config)
        with vcluster_node.api_client() as client:
            create_nodes(client, nodes)
        kai.start(vcluster_node)
        yield KaiCluster(plane=vcluster_node, config=config, nodes=nodes)
    finally:
        kai.stop()
        node_kwok.stop()


def real_vcluster_config(plane: ControlPlane, path: Path) -> Path:
    """examples/config.yaml with the upstream chart from ../shared/third_party, exposed by
    NodePort at the node's address: the operator runs on the host, outside the node's network
    namespace, so that address is the one it (and the kubeconfigs it issues) can reach."""
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART),
                                exposure={"type": "NodePort", "address": plane.node.network.node_ip})
    OperatorConfig.model_validate(document)
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def real_operator(vcluster_node: ControlPlane, tmp_path_factory):
    """The operator (on the host, its guard on loopback) driving REAL vClusters on the node plane."""
    directory = tmp_path_factory.mktemp("real-operator")
    running = OperatorProcess(vcluster_node, real_vcluster_config(vcluster_node, directory / "config.yaml"),
                              vcluster_node.log_dir / "operator-real-vcluster.log",
                              extra_args=guard_flags(directory / "guard-certs")).start()
    yield running
    running.stop()
    remove_guard_configurations(vcluster_node)


@pytest.fixture(scope="module")
def real_tenants(vcluster_node: ControlPlane, real_operator: OperatorProcess):
    """Tenant helpers on the node plane; the module's tenants are offboarded when it ends."""
    tenants = Tenants(vcluster_node, real_operator)
    yield tenants
    tenants.delete_all()


@pytest.fixture(scope="module")
def tenants_api(plane: ControlPlane, operator: OperatorProcess):
    """Tenant helpers; the module's tenants are deleted (and offboarded) when it ends."""
    tenants = Tenants(plane, operator)
    yield tenants
    tenants.delete_all()
