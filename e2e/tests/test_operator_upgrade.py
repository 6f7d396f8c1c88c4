"""The operator's own upgrade and rollback with tenants running (issue 39 item 3), from releases as
a platform team gets them (`release.build`): the previous release, 0.2.0, built from its last commit
(`release.build.PREVIOUS_RELEASE`; no tag existed), and this tree's, 0.3.0. Each is its image archive
imported into the node's containerd and its packaged chart; both charts name their image by digest.

Three tenants, one per trust level, each with a REAL vCluster (0.36.1, pulled by the operator's helm
from a chart repository served from the host) and a GPU pod in it that the real KAI-Scheduler bound
to a SIMULATED GPU node (kwok): a time-slice replica (Trusted), a KAI fraction under HAMi-core
(Internal), a whole GPU (Untrusted). Then `helm upgrade` to this release and `helm rollback` to the
previous one, with the chart's defaults (two replicas, surge-first rollout), while tenant pod
creations stream through the fail-closed admission guard, until the new leader (the Lease holder
among the new pods) has finished a pass of every tenant (its metrics name each Ready). Asserted
after each: no creation refused (at most one cut with its keep-alive connection, see
admission_stream.CUT_CONNECTION), no tenant's Ready condition changed (its
lastTransitionTime is the same), no vCluster control-plane pod or GPU pod replaced or restarted
(same uid, same restart count), no vCluster release upgraded, the owners' kubeconfig Secrets
unchanged and still answering. The figures are printed; docs/operations.md records them with the
procedure.

The CRD changes with the release, as a platform team that manages it apart from the chart
(`crd.install: false`) changes it: 0.2.0's (v1alpha1 stored, v1beta1 served) before 0.2.0 is
installed, this tree's (v1beta1 stored) just before `helm upgrade`, then `gputenant migrate-storage`
(every tenant rewritten as v1beta1, storedVersions trimmed), and 0.2.0's CRD again with
`helm rollback`, which the API server allows because 0.2.0's CRD serves v1beta1 (docs/api-versions.md).
After the upgrade and after the rollback every tenant reads the same through both versions, the
operator in charge converting through its Service.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import kubernetes
import pytest

from gputenant import naming
from gputenant.api.conversion import convert
from kubeplane import ControlPlane, builders, wait_for
from kubeplane.admission_stream import CREATIONS_PER_SECOND, MOST_CUT_CONNECTIONS, CreationStream, rollout_failures
from kubeplane.builders import RESTRICTED
from kubeplane.fixtures import install_crds
from kubeplane.images import TEST_IMAGE
from kubeplane.incluster import RELEASE, InClusterOperator, real_vcluster_values
from kubeplane.operator_image import manifest_digest
from kubeplane.virtual_cluster import VIRTUAL_NAMESPACE, VirtualCluster, issued_kubeconfig, synced_host_pods
from release.build import PREVIOUS_RELEASE, build, checkout

pytestmark = pytest.mark.plane

NAMESPACE = "gputenant-upgrade"
CURRENT_CRD = Path(__file__).resolve().parents[2] / "crds" / "tenant.yaml"
GPUTENANT = Path(sys.executable).parent / "gputenant"
STORED = "gputenants.v1alpha1.gputenant.io"
"""The tenants are read as v1alpha1, which both releases' operators read and write."""
READY_TIMEOUT_SECONDS = 600
"""Three real virtual control planes at once on a 2-core machine."""
FLOW_TIMEOUT_SECONDS = 240
TENANTS = {
    "up-trusted": builders.tenant("up-trusted", "Trusted", gpus=1, sharing={"mode": "TimeSlicing"},
                                  kubeconfig={"roles": ["admin"]}, preventDeletion=False),
    "up-internal": builders.tenant("up-internal", "Internal", gpus=0.25,
                                   sharing={"mode": "HAMi", "hami": {"corePercent": 25}},
                                   kubeconfig={"roles": ["admin"]}, preventDeletion=False),
    "up-untrusted": builders.tenant("up-untrusted", "Untrusted", gpu={"limit": 1}, sharing={"mode": "Exclusive"},
                                    kubeconfig={"roles": ["admin"]}, preventDeletion=False),
}


def gpu_pod(tenant: str) -> dict:
    """The tenant's GPU pod as its trust level allows one: a time-slice replica or a whole GPU by
    resource, a fraction by KAI's annotation."""
    resources: dict = {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}
    annotations = {}
    if tenant == "up-internal":
        annotations["gpu-fraction"] = "0.25"
    else:
        resources["limits"]["nvidia.com/gpu"] = "1"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpu-work", "namespace": VIRTUAL_NAMESPACE, "annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "work", "image": TEST_IMAGE, "command": ["sleep", "36000"], "securityContext": dict(RESTRICTED),
                "resources": resources}]}}


@pytest.fixture(scope="module")
def releases(vcluster_node, tmp_path_factory) -> dict[str, dict[str, Path]]:
    work = tmp_path_factory.mktemp("releases")
    previous_tree = checkout(PREVIOUS_RELEASE, work / "previous-tree")
    return {"previous": {**build(work / "previous", bin_dir=vcluster_node.bin_dir, source=previous_tree,
                                 commit=PREVIOUS_RELEASE), "crd": previous_tree / "crds" / "tenant.yaml"},
            "current": {**build(work / "current", bin_dir=vcluster_node.bin_dir), "crd": CURRENT_CRD}}


@pytest.fixture(scope="module")
def installed(vcluster_kai, vcluster_chart_repository, releases, tmp_path_factory):
    """The previous release installed with the chart's defaults, and the three tenants Ready with
    their GPU pods Running in their vClusters; offboarded and uninstalled at the end."""
    plane = vcluster_kai.plane
    config = real_vcluster_values(plane, vcluster_chart_repository.url)
    operator = InClusterOperator(plane, NAMESPACE, values={"config": config}, chart=releases["previous"]["chart"],
                                 image_archive=releases["previous"]["image"])
    directory = tmp_path_factory.mktemp("upgrade")
    install_crds(plane, releases["previous"]["crd"])
    try:
        operator.install(directory)
        for body in TENANTS.values():
            plane.kubectl("apply", "-f", "-", input=json.dumps(body))
        virtual = {}
        for name in TENANTS:
            wait_ready(plane, operator, name)
            path = issued_kubeconfig(plane, name, f"tenant-{name}", directory / f"{name}.kubeconfig")
            virtual[name] = VirtualCluster(plane, path)
            virtual[name].apply(gpu_pod(name))
        for name in TENANTS:
            try:
                wait_for(lambda name=name: (virtual[name].pod("gpu-work") or {}).get("status", {}).get("phase") == "Running",
                         timeout=FLOW_TIMEOUT_SECONDS, interval=2, what=f"{name}'s GPU pod Running in its vCluster")
            except TimeoutError as error:
                raise AssertionError(f"{error}\n{virtual[name].describe('gpu-work')}") from None
        yield operator, virtual, directory
    finally:
        for name in TENANTS:
            plane.kubectl("delete", STORED, name, "--ignore-not-found", "--wait=false", check=False)
        for name in TENANTS:
            wait_for(lambda name=name: plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name) is None,
                     timeout=240, interval=2, what=f"{name} offboarded")
        operator.uninstall()
        install_crds(plane, CURRENT_CRD)


def crd_versions(plane: ControlPlane) -> tuple[list[str], str, list[str]]:
    """The GpuTenant CRD's served versions, its storage version and its status.storedVersions (which
    also remembers what earlier modules on this plane stored)."""
    crd = json.loads(plane.kubectl("get", "crd", "gputenants.gputenant.io", "-o", "json").stdout)
    return ([v["name"] for v in crd["spec"]["versions"] if v["served"]],
            next(v["name"] for v in crd["spec"]["versions"] if v["storage"]), crd["status"]["storedVersions"])


def conversion_service(plane: ControlPlane) -> dict | None:
    """The Service the CRD's conversion webhook names, once the operator added its CA bundle."""
    crd = json.loads(plane.kubectl("get", "crd", "gputenants.gputenant.io", "-o", "json").stdout)
    client_config = crd["spec"]["conversion"].get("webhook", {}).get("clientConfig", {})
    return client_config.get("service") if client_config.get("caBundle") else None


def read_in_both_versions(plane: ControlPlane, name: str) -> tuple[dict, dict]:
    """The tenant as stored (v1alpha1) and as v1beta1, which the new release's operator converts
    (it points the CRD at its Service once it serves; until then the API server answers 500)."""
    def as_v1beta1():
        try:
            return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)
        except kubernetes.client.ApiException as error:
            if error.status == 500 and "conversion webhook" in (error.body or ""):
                return None
            raise
    served = wait_for(as_v1beta1, timeout=60, interval=1, what=f"{name} read as v1beta1")
    stored = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)
    assert stored is not None
    return stored, served


def tenant(plane: ControlPlane, name: str) -> dict:
    return json.loads(plane.kubectl("get", STORED, name, "-o", "json").stdout)


def ready_condition(plane: ControlPlane, name: str) -> dict:
    return next((c for c in tenant(plane, name).get("status", {}).get("conditions") or [] if c["type"] == "Ready"), {})


def wait_ready(plane: ControlPlane, operator: InClusterOperator, name: str) -> None:
    try:
        wait_for(lambda: ready_condition(plane, name).get("status") == "True", timeout=READY_TIMEOUT_SECONDS,
                 interval=2, what=f"{name} Ready")
    except TimeoutError as error:
        raise AssertionError(f"{error}: {tenant(plane, name).get('status')}\n{operator.describe()}") from None


def running_state(plane: ControlPlane, virtual: dict[str, VirtualCluster]) -> dict:
    """What must not change across an upgrade: per tenant, Ready's transition time, the control
    plane's and the GPU pod's host pods (uid, restarts), the virtual pod's uid and phase, the
    vCluster's Helm revision and the owner's kubeconfig."""
    state = {}
    for name, cluster in virtual.items():
        namespace = f"tenant-{name}"
        control_plane = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", "app=vcluster",
                                                 "-o", "json").stdout)["items"]
        gpu = cluster.pod("gpu-work") or {}
        state[name] = {
            "ready": (ready_condition(plane, name).get("status"), ready_condition(plane, name).get("lastTransitionTime")),
            "control plane": sorted((p["metadata"]["uid"], restarts(p)) for p in control_plane),
            "gpu pod": (gpu.get("metadata", {}).get("uid"), gpu.get("status", {}).get("phase")),
            "gpu host pod": sorted((p["metadata"]["uid"], restarts(p), p["spec"].get("nodeName"))
                                   for p in synced_host_pods(plane, namespace, "gpu-work")),
            "vcluster revision": [release["revision"] for release in json.loads(plane.helm(
                "list", "--namespace", namespace, "--output", "json").stdout)],
            "kubeconfig": plane.kubectl("get", "secret", naming.kubeconfig_secret_name(name, "admin"), "-n", namespace,
                                        "-o", "jsonpath={.data}").stdout,
        }
    return state


def restarts(pod: dict) -> int:
    return sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def answering(cluster: VirtualCluster) -> bool:
    return cluster.kubectl("get", "pods", "-n", VIRTUAL_NAMESPACE, "-o", "name", check=False).returncode == 0


def deployment_images(operator: InClusterOperator) -> set[str]:
    return {pod.spec.containers[0].image for pod in operator.pods()}


METRICS_PORT = 8081
"""The chart's metrics.port."""
READ_METRICS = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/metrics').read().decode())"


def leader_passed_every_tenant(plane: ControlPlane, operator: InClusterOperator) -> bool:
    """The Lease is held by a pod of the current rollout, and that pod has finished a pass of every
    tenant and found it Ready (`gputenant_tenant_ready` has a tenant's series only after a pass in
    that process)."""
    holder = plane.kubectl("get", "lease", RELEASE, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}",
                           check=False).stdout
    pod = holder.rsplit("_", 1)[0]
    if not holder or pod not in {p.metadata.name for p in operator.pods()}:
        return False
    metrics = plane.kubectl("exec", "-n", NAMESPACE, pod, "--", "python3", "-c", READ_METRICS, check=False).stdout
    return all(re.search(rf'^gputenant_tenant_ready{{[^}}]*tenant="{name}"[^}}]*}} 1\.0$', metrics, re.MULTILINE)
               for name in TENANTS)


def change_release(plane: ControlPlane, operator: InClusterOperator, virtual: dict[str, VirtualCluster],
                   change, what: str) -> None:
    """Run `change` (an upgrade or a rollback) while tenant pods are created, until the new release's
    leader has reconciled every tenant; then assert that nothing the tenants run noticed."""
    before = running_state(plane, virtual)
    assert all(value["gpu pod"][1] == "Running" and value["gpu host pod"] for value in before.values()), before
    with CreationStream(plane, "tenant-up-trusted") as stream:
        time.sleep(3)
        started = time.monotonic()
        change()
        wait_for(operator.rolled_out, timeout=300, interval=1, what=f"the operator rolled out ({what})")
        took = time.monotonic() - started
        try:
            wait_for(lambda: leader_passed_every_tenant(plane, operator), timeout=180, interval=2,
                     what=f"the new leader's pass of every tenant ({what})")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{operator.describe()}") from None
        passed = time.monotonic() - started
    during = [outcome for at, outcome in stream.outcomes if at >= started]
    failures, cut = rollout_failures(during)
    after = running_state(plane, virtual)
    print(f"\n{what}: rolled out in {took:.0f} s, every tenant reconciled by the new leader after {passed:.0f} s; "
          f"{len(during)} tenant pod creations at {CREATIONS_PER_SECOND}/s, "
          f"{sum(failures.values())} refused or failed, {sum(cut.values())} cut connections; tenants' Ready, "
          f"control planes, GPU pods and kubeconfigs {'unchanged' if after == before else 'CHANGED'}")
    assert len(during) >= CREATIONS_PER_SECOND * 10
    assert not failures, failures
    assert sum(cut.values()) <= MOST_CUT_CONNECTIONS, cut
    assert after == before
    assert all(answering(cluster) for cluster in virtual.values())


def reads_the_same_in_both_versions(plane: ControlPlane) -> None:
    """Once the operator in charge points the CRD's conversion at its Service, every tenant reads the
    same through v1alpha1 and v1beta1."""
    wait_for(lambda: conversion_service(plane) == {"namespace": NAMESPACE, "name": f"{RELEASE}-guard", "port": 9444,
                                                   "path": "/convert"},
             timeout=60, interval=1, what="the operator to point the CRD's conversion at its Service")
    for name in TENANTS:
        alpha, beta = read_in_both_versions(plane, name)
        assert beta["apiVersion"] == "gputenant.io/v1beta1" and beta["metadata"]["uid"] == alpha["metadata"]["uid"]
        assert convert(beta, "v1alpha1")["spec"] == alpha["spec"]


def test_upgrade_and_rollback_with_tenants_running_disturb_none_of_them(installed, releases, vcluster_kai):
    plane = vcluster_kai.plane
    operator, virtual, directory = installed
    previous, current = releases["previous"], releases["current"]
    by_digest = {name: f"gpu-tenant-operator@{manifest_digest(release['image'])}"
                 for name, release in (("previous", previous), ("current", current))}
    assert deployment_images(operator) == {by_digest["previous"]}

    # Helm's pitfall that docs/operations.md warns of: --reuse-values renders the new chart with the
    # old chart's defaults, so the pods would keep the previous release's image digest.
    reused = json.loads(plane.helm("upgrade", RELEASE, str(current["chart"]), "--namespace", NAMESPACE, "--reuse-values",
                                   "--dry-run=server", "--output", "json").stdout)["manifest"]
    assert f"image: {by_digest['previous']}" in reused and by_digest["current"] not in reused

    def upgrade() -> None:
        plane.require_node().containerd.import_images([current["image"]])
        install_crds(plane, current["crd"])
        operator.chart = current["chart"]
        plane.helm("upgrade", RELEASE, str(current["chart"]), "--namespace", NAMESPACE,
                    "--reset-then-reuse-values")
    assert crd_versions(plane)[:2] == (["v1alpha1", "v1beta1"], "v1alpha1")
    change_release(plane, operator, virtual, upgrade, "upgrade 0.2.0 -> 0.3.0")
    served, storage, stored = crd_versions(plane)
    assert (served, storage) == (["v1alpha1", "v1beta1"], "v1beta1") and set(stored) == {"v1alpha1", "v1beta1"}
    reads_the_same_in_both_versions(plane)
    migrated = subprocess.run([str(GPUTENANT), "migrate-storage", "--kubeconfig", str(plane.kubeconfig_path)],
                              capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr
    assert "-> [v1beta1]" in migrated.stdout, migrated.stdout
    assert crd_versions(plane) == (["v1alpha1", "v1beta1"], "v1beta1", ["v1beta1"])
    assert deployment_images(operator) == {by_digest["current"]}
    history = json.loads(plane.helm("history", RELEASE, "--namespace", NAMESPACE, "--output", "json").stdout)
    assert [(h["revision"], h["chart"], h["status"]) for h in history] == [
        (1, "gpu-tenant-operator-0.2.0", "superseded"), (2, "gpu-tenant-operator-0.3.0", "deployed")]

    def rollback() -> None:
        install_crds(plane, previous["crd"])  # stores v1alpha1 again; it serves v1beta1, so the API server agrees
        plane.helm("rollback", RELEASE, "1", "--namespace", NAMESPACE)
    change_release(plane, operator, virtual, rollback, "rollback 0.3.0 -> 0.2.0")
    assert crd_versions(plane) == (["v1alpha1", "v1beta1"], "v1alpha1", ["v1beta1", "v1alpha1"])
    reads_the_same_in_both_versions(plane)
    assert deployment_images(operator) == {by_digest["previous"]}
