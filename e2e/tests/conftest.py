"""Runs the real operator (`gputenant run`, a subprocess on the host) against the session's
plane with a node (`vcluster_node`), where every tenant's vCluster is the REAL upstream chart
v0.36.1 from ../shared/third_party: its pod runs on the node, keeps its data on a claim the real
local-path-provisioner fills, and is reached from the host by NodePort at the node's address.
Nothing of the vCluster is simulated; only GPU hardware is (kwok nodes, `vcluster_kai`).

The operator serves its admission guard (`--webhook-host 127.0.0.1`, a free loopback port,
generated certificates), so every tenant pod, the vCluster control-plane pod included, is admitted
through it as in production; the webhook configurations are removed when the operator stops, so
later modules do not meet a guard that no longer answers (it fails closed).

The operator is `kubeplane.operator_process.OperatorProcess`, as its own user (in
system:masters here; the chart's RBAC is exercised by test_chart_install.py and
test_chart_real_vcluster.py).

Test modules whose tests use the operator and the `plane` fixture together override `plane` with
`vcluster_node` (the plane the operator runs on); host-only tests keep the node-less `plane`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from gputenant.config.models import OperatorConfig
from kubeplane import ControlPlane, builders, wait_for
from kubeplane.argocd import ArgoCD
from kubeplane.chart_repository import ChartRepository
from kubeplane.fixtures import REAL_VCLUSTER_CHART, install_crds, install_kai_queue_crd
from kubeplane.inprocess import inprocess, op  # noqa: F401 (fixtures: the in-process reconciler, test_reconciler_inprocess*)
from kubeplane.kai_fixtures import gpu_scheduling
from kubeplane.operator_process import RESYNC_SECONDS, OperatorProcess, guarded_operator
from kubeplane.pytest_plugin import kwok, session_plane  # noqa: F401 (fixture: kwok on the session plane, for simulated GPU nodes)
from kubeplane.vcluster_node import ready_for_real_vclusters

REPO_ROOT = Path(__file__).resolve().parents[2]


ON_VCLUSTER_NODE = "on_vcluster_node"
"""The marker of a module whose `plane` is the plane its real vClusters run on."""


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> ControlPlane:
    """The session's plane; in a module marked `on_vcluster_node` (``pytestmark``), the plane with a
    node its real vClusters run on: the one place a module's plane is swapped."""
    if request.node.get_closest_marker(ON_VCLUSTER_NODE):
        return request.getfixturevalue("vcluster_node")
    return session_plane(pytestconfig)


@pytest.fixture(scope="session")
def crds(pytestconfig: pytest.Config) -> None:
    """The GpuTenant and Queue CRDs on the session's plane."""
    install_crds(session_plane(pytestconfig), REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(session_plane(pytestconfig))


def tenant_manifest(name: str, trust: str, owner: str, gpus: float = 1, **spec) -> dict:
    """`builders.tenant` with the owner this suite's tests name."""
    return builders.tenant(name, trust, owner=owner, gpus=gpus, **spec)


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all(objects))


def tenant(plane: ControlPlane, name: str) -> dict | None:
    return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)


def condition(body: dict | None, condition_type: str) -> dict:
    for found in ((body or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == condition_type:
            return found
    return {}


def wait_ready(plane: ControlPlane, operator: OperatorProcess, name: str, timeout: float = 300) -> dict:
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
        them, so no vCluster of this module outlives its operator (or holds the node's memory)."""
        self.delete(*self.applied, timeout=timeout)

    def delete(self, *names: str, timeout: float = 300) -> None:
        """Delete `names` (preventDeletion lifted) and wait until the operator has offboarded them."""
        remaining = sorted(name for name in names if self.get(name) is not None)
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

    def volumes_claimed_in(self, namespace: str | None = None) -> set[str]:
        """PersistentVolumes (released ones too) claimed from `namespace`; every one when None."""
        volumes = json.loads(self.plane.kubectl("get", "persistentvolumes", "-o", "json").stdout)["items"]
        return {volume["metadata"]["name"] for volume in volumes
                if namespace is None or (volume["spec"].get("claimRef") or {}).get("namespace") == namespace}

    def assert_nothing_left(self, name: str, namespace: str, data_volumes: set[str]) -> None:
        """Nothing of the deleted tenant on the host: its namespace (and with it the Helm release, the
        StatefulSet's data claim, Secrets), the volumes the provisioner made for it (reclaim policy
        Delete), and every object labelled with the tenant, Argo CD's cluster Secret and the Queue included."""
        plane = self.plane
        assert plane.kubectl("get", "namespace", namespace, check=False).returncode != 0
        try:
            wait_for(lambda: not (self.volumes_claimed_in(namespace) or data_volumes & self.volumes_claimed_in()),
                     timeout=120, interval=2, what=f"the volumes of {namespace} deleted by the provisioner")
        except TimeoutError:
            raise AssertionError(plane.kubectl("get", "persistentvolumes", "-o", "wide").stdout) from None
        labelled = f"{naming.TENANT_LABEL}={name}"
        namespaced = plane.kubectl("get", "secrets,configmaps,persistentvolumeclaims,serviceaccounts,roles,"
                                   "rolebindings,networkpolicies,resourcequotas,limitranges,statefulsets,services,pods",
                                   "--all-namespaces", "-l", labelled, "-o", "name").stdout.split()
        cluster_wide = plane.kubectl("get", "namespaces,clusterroles,clusterrolebindings,queues.scheduling.run.ai",
                                     "-l", labelled, "-o", "name").stdout.split()
        helm_release = plane.kubectl("get", "secrets", "--all-namespaces", "-o", "name",
                                     "-l", f"owner=helm,name={naming.release_name(name)}").stdout.split()
        assert not (namespaced or cluster_wide or helm_release), (namespaced, cluster_wide, helm_release)

    def wait_ready(self, name: str, timeout: float = 300) -> dict:
        """Up to 5 minutes: a real vCluster takes 25-60 s alone, more on 2 busy cores."""
        return wait_ready(self.plane, self.operator, name, timeout)


@pytest.fixture(scope="session")
def vcluster_node(node_plane: ControlPlane):
    """The node plane made ready for REAL vClusters (kubeplane.vcluster_node)."""
    with ready_for_real_vclusters(node_plane) as plane:
        yield plane


@pytest.fixture(scope="module")
def vcluster_chart_repository(vcluster_node: ControlPlane, tmp_path_factory):
    """The real vCluster chart served over HTTP from the host, where the node's pods reach it: for
    operators running in-cluster, which cannot read ../shared (kubeplane.chart_repository)."""
    repository = ChartRepository(tmp_path_factory.mktemp("charts")).start(
        vcluster_node, REAL_VCLUSTER_CHART, vcluster_node.require_node().network.host_ip)
    yield repository
    repository.stop()


@pytest.fixture(scope="session")
def vcluster_kai(vcluster_node: ControlPlane):
    """The node plane with the real KAI-Scheduler and SIMULATED GPU nodes (kwok) for every pool of
    examples/config.yaml, for tests whose tenants' GPU pods travel from a real vCluster through the
    guard into KAI. The real node stays the plane's CPU node. KAI's reservation pods on those nodes
    get the GPU report a real node would write (SimulatedGpuReservations), so fractions bind."""
    with gpu_scheduling(vcluster_node, OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def operator(vcluster_node: ControlPlane, tmp_path_factory, request):
    """The operator (on the host, its guard on loopback) driving REAL vClusters on the node plane.
    Per module: a module may override it to start it with its own environment (test_metrics.py) or
    pools (test_hami_core_double.py), or set OPERATOR_RESYNC_SECONDS (None: the production resync;
    default: the tests' short one)."""
    resync = getattr(request.module, "OPERATOR_RESYNC_SECONDS", RESYNC_SECONDS)
    with guarded_operator(vcluster_node, tmp_path_factory.mktemp("operator"), resync_seconds=resync) as running:
        yield running


@pytest.fixture(scope="module")
def argocd(vcluster_node: ControlPlane, tmp_path_factory):
    """Argo CD (application controller, repo server, ApplicationSet controller, redis) and the Git
    repository it reads, on the node plane, for one module: only the GitOps tests ask for it (`make
    tools` built Argo CD with the other tools; see kubeplane.argocd)."""
    running = ArgoCD(tmp_path_factory.mktemp("argocd")).start(vcluster_node)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def real_operator(operator: OperatorProcess) -> OperatorProcess:
    """`operator`, by the name the real-vCluster tests use."""
    return operator


@pytest.fixture(scope="module")
def tenants_api(operator: OperatorProcess):
    """Tenant helpers on the operator's plane; the module's tenants are offboarded when it ends."""
    tenants = Tenants(operator.plane, operator)
    yield tenants
    tenants.delete_all()


@pytest.fixture(scope="module")
def real_tenants(tenants_api: Tenants) -> Tenants:
    """`tenants_api`, by the name the real-vCluster tests use."""
    return tenants_api
