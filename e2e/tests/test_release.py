"""The release as a platform team gets it (`python -m release`, `make release`): the packaged chart,
the image archive, the SBOM and SHA256SUMS, and nothing from the source tree. The operator is
installed from them alone: the image archive imported into the node's containerd (the chart names
it by digest, so the tag is never used), the packaged chart by `helm install`. It then onboards a
tenant on a REAL vCluster (0.36.1, pulled by the operator's own helm from a chart repository served
over HTTP from the host, as charts.loft.sh would serve it) and offboards it.

The image's build being reproducible (two fresh builds, one digest) is shown by `make release
RELEASE_ARGS=--fresh` twice, with the figures in docs/install.md, not here: a fresh build is
minutes of CPU. What is checked here is that packing is: the chart packed again later is the same
bytes.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import time

import pytest
import yaml

from gputenant import naming
from kubeplane import wait_for
from kubeplane.incluster import InClusterOperator, real_vcluster_values
from kubeplane.operator_image import manifest_digest
from kubeplane.tools import pinned_versions
from release import build as release
from release import chart

pytestmark = pytest.mark.plane

NAMESPACE = "gputenant-release"
TENANT = "released"
TENANT_NAMESPACE = f"tenant-{TENANT}"


@pytest.fixture(scope="module")
def dist(vcluster_node, tmp_path_factory):
    return release.build(tmp_path_factory.mktemp("release") / "dist", bin_dir=vcluster_node.bin_dir)


def test_the_release_holds_the_chart_the_image_the_sbom_and_their_checksums(dist):
    sums = dict(reversed(line.split("  ")) for line in dist["checksums"].read_text().splitlines())
    assert sums == {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                    for kind, path in dist.items() if kind != "checksums"}
    version = release.project_version()
    with tarfile.open(dist["chart"]) as packed:
        chart_yaml = yaml.safe_load(packed.extractfile("gpu-tenant-operator/Chart.yaml"))  # type: ignore[arg-type]
        values = yaml.safe_load(packed.extractfile("gpu-tenant-operator/values.yaml"))  # type: ignore[arg-type]
        assert "gpu-tenant-operator/files/tenant-crd.yaml" in packed.getnames(), "the CRD symlink resolved"
    assert (chart_yaml["version"], chart_yaml["appVersion"]) == (version, version)
    assert values["image"]["digest"] == manifest_digest(dist["image"])
    bom = json.loads(dist["sbom"].read_text())
    names = {package["name"] for package in bom["packages"]}
    assert {"gpu-tenant-operator", "kopf", "kubernetes", "python3", "helm"} <= names, names
    assert bom["documentNamespace"].endswith(values["image"]["digest"])


def test_the_chart_packed_again_later_gives_the_same_bytes(vcluster_node, dist, tmp_path):
    """Packed again, seconds after `dist` was (helm stamps every entry with the time it packs)."""
    time.sleep(2)
    again = chart.package(vcluster_node.bin_dir / "helm", release.project_version(), manifest_digest(dist["image"]),
                          release.source_time(), tmp_path)
    assert again.read_bytes() == dist["chart"].read_bytes()


@pytest.fixture(scope="module")
def from_dist(vcluster_node, dist, vcluster_chart_repository, tmp_path_factory):
    """The operator from the release alone, configured as examples/config.yaml but for where the
    vCluster chart comes from and how the vClusters are exposed (`real_vcluster_values`)."""
    config = real_vcluster_values(vcluster_node, vcluster_chart_repository.url)
    operator = InClusterOperator(vcluster_node, NAMESPACE, values={"replicas": 1, "config": config},
                                 chart=dist["chart"], image_archive=dist["image"])
    try:
        yield operator.install(tmp_path_factory.mktemp("from-dist"))
    finally:
        vcluster_node.kubectl("delete", "gputenant", TENANT, "--ignore-not-found", "--timeout=180s", check=False)
        operator.uninstall()


def conditions(body: dict | None) -> dict[str, dict]:
    return {c["type"]: c for c in ((body or {}).get("status") or {}).get("conditions") or []}


def test_the_operator_from_the_release_onboards_a_real_vcluster_tenant_and_offboards_it(from_dist, vcluster_node):
    [pod] = from_dist.pods()
    assert pod.spec.containers[0].image.startswith("gpu-tenant-operator@sha256:")
    vcluster_node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": TENANT},
        "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}], "gpu": {"quota": 1},
                 "vcluster": {"kubernetesVersion": pinned_versions()["kube"]}}}))

    def tenant() -> dict | None:
        found = vcluster_node.kubectl("get", "gputenant", TENANT, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def ready() -> dict | None:
        body = tenant()
        return body if conditions(body).get("Ready", {}).get("status") == "True" else None
    try:
        wait_for(ready, timeout=300, interval=2, what=f"{TENANT} Ready")
    except TimeoutError as error:
        raise AssertionError(f"{error}: {json.dumps(conditions(tenant()), indent=1)}\n{from_dist.describe()}") from None
    history = json.loads(vcluster_node.helm("history", TENANT, "--namespace", TENANT_NAMESPACE,
                                            "--output", "json").stdout)
    assert [(h["revision"], h["chart"]) for h in history] == [(1, "vcluster-0.36.1")]
    vcluster_node.kubectl("delete", "gputenant", TENANT, "--timeout=180s")
    wait_for(lambda: vcluster_node.kubectl("get", "namespace", TENANT_NAMESPACE, check=False).returncode != 0,
             timeout=180, interval=2, what=f"{TENANT_NAMESPACE} deleted")
    assert not vcluster_node.kubectl("get", "queues.scheduling.run.ai", "-l", f"{naming.TENANT_LABEL}={TENANT}",
                                     "-o", "name").stdout.split()
