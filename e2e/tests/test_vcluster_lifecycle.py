"""The vCluster release through real Helm (pyhelm3) on the real plane: the real upstream chart
(../shared/third_party; copies of it declaring other versions for the upgrade path).

Host-side only: these tests judge the releases Helm keeps, so they run on the node-less plane,
where the vCluster pod stays Pending. The pod itself running is test_vcluster_real_operator.py's.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant.helm import (
    ChartRef,
    HelmAction,
    InvalidValuesError,
    TransientHelmError,
    UpgradePathError,
    VClusterReleases,
)
from kubeplane.fixtures import REAL_VCLUSTER_CHART

CHART_VERSION = str(yaml.safe_load((REAL_VCLUSTER_CHART / "Chart.yaml").read_text())["version"])

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"the vcluster chart is missing at {REAL_VCLUSTER_CHART}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def values(label: str = "one", server: str = "https://team.gpu.invalid") -> dict:
    """A small values document: enough to tell revisions apart and to name an exported server."""
    return {"controlPlane": {"statefulSet": {"labels": {"gputenant.io/test": label}}},
            "exportKubeConfig": {"server": server}}


@pytest.fixture(scope="module")
def helm_home(plane):
    """Helm's cache and config inside the plane's directory, so the user's helm setup is untouched."""
    with pytest.MonkeyPatch.context() as patch:
        for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            patch.setenv(key, plane.env()[key])
        yield


@pytest.fixture
def releases(plane, helm_home) -> VClusterReleases:
    return VClusterReleases(plane.kubeconfig_path, helm_path=plane.bin_dir / "helm", retry_attempts=2,
                            retry_max_wait_seconds=0.5)


@pytest.fixture
def namespace(plane):
    name = plane.create_namespace(unique("vc")).metadata.name
    yield name
    with plane.api_client() as api:
        kubernetes.client.CoreV1Api(api).delete_namespace(name)


def chart_at_version(tmp_path: Path, version: str) -> ChartRef:
    """A copy of the chart (in the test's temporary folder) that declares another version, to
    exercise the upgrade path."""
    directory = tmp_path / f"vcluster-{version}"
    shutil.copytree(REAL_VCLUSTER_CHART, directory, dirs_exist_ok=True)
    chart_yaml = directory / "Chart.yaml"
    metadata = yaml.safe_load(chart_yaml.read_text())
    metadata["version"] = version
    chart_yaml.write_text(yaml.safe_dump(metadata))
    return ChartRef(local_path=directory)


def history(plane, release: str, namespace: str) -> list[dict]:
    return yaml.safe_load(plane.helm("history", release, "-n", namespace, "-o", "yaml").stdout)


def statefulset_label(plane, release: str, namespace: str) -> str:
    with plane.api_client() as api:
        statefulset = kubernetes.client.AppsV1Api(api).read_namespaced_stateful_set(release, namespace)
    return statefulset.metadata.labels["gputenant.io/test"]


def test_same_values_install_once_and_changed_values_upgrade_once(plane, releases, namespace):
    chart, version = ChartRef(local_path=REAL_VCLUSTER_CHART), CHART_VERSION

    first = asyncio.run(releases.ensure("team", namespace, chart, version, values("one")))
    second = asyncio.run(releases.ensure("team", namespace, chart, version, values("one")))

    assert (first.action, second.action) == (HelmAction.INSTALLED, HelmAction.UNCHANGED)
    assert (releases.counters.installs, releases.counters.upgrades) == (1, 0)
    assert len(history(plane, "team", namespace)) == 1
    assert first.values_hash == second.values_hash and first.chart_version == version

    changed = asyncio.run(releases.ensure("team", namespace, chart, version, values("two")))
    assert changed.action == HelmAction.UPGRADED and changed.revision == 2
    assert (releases.counters.installs, releases.counters.upgrades) == (1, 1)
    assert len(history(plane, "team", namespace)) == 2
    assert statefulset_label(plane, "team", namespace) == "two"

    assert asyncio.run(releases.uninstall("team", namespace)) is True
    assert asyncio.run(releases.uninstall("team", namespace)) is False


def test_a_release_known_absent_installs_with_one_helm_process(plane, releases, namespace):
    chart, version = ChartRef(local_path=REAL_VCLUSTER_CHART), CHART_VERSION

    installed = asyncio.run(releases.ensure("team", namespace, chart, version, values("one"), known_absent=True))

    assert installed.action == HelmAction.INSTALLED and installed.helm_invocations == 1
    assert [revision["status"] for revision in history(plane, "team", namespace)] == ["deployed"]
    assert statefulset_label(plane, "team", namespace) == "one"


def test_skipping_a_minor_is_refused_without_touching_the_release(plane, releases, namespace, tmp_path):
    asyncio.run(releases.ensure("team", namespace, chart_at_version(tmp_path, "0.34.2"), "0.34.2", values()))

    with pytest.raises(UpgradePathError) as refused:
        asyncio.run(releases.ensure("team", namespace, chart_at_version(tmp_path, "0.36.1"), "0.36.1", values()))

    assert (refused.value.installed, refused.value.wanted) == ("0.34.2", "0.36.1")
    assert refused.value.values_hash is not None
    assert releases.counters.upgrades == 0
    assert [entry["chart"] for entry in history(plane, "team", namespace)] == ["vcluster-0.34.2"]

    next_minor = asyncio.run(releases.ensure("team", namespace, chart_at_version(tmp_path, "0.35.0"), "0.35.0",
                                             values()))
    assert next_minor.action == HelmAction.UPGRADED
    with pytest.raises(UpgradePathError, match="downgrade"):
        asyncio.run(releases.ensure("team", namespace, chart_at_version(tmp_path, "0.34.2"), "0.34.2", values()))


def test_values_the_chart_refuses_fail_permanently_without_retry(plane, releases, namespace):
    bad = {"controlPlane": {"statefulSet": {"highAvailability": {"replicas": "three"}}}}
    version = CHART_VERSION

    with pytest.raises(InvalidValuesError) as refused:
        asyncio.run(releases.ensure("team", namespace, ChartRef(local_path=REAL_VCLUSTER_CHART), version, bad))

    assert "replicas" in refused.value.message
    # helm version (at construction), then one attempt: status query + the refused install
    assert releases.counters.invocations == 1 + 2
    assert releases.counters.installs == 0


def test_unreachable_cluster_is_transient_and_retried(plane, helm_home, tmp_path):
    config = yaml.safe_load(plane.kubeconfig_path.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    releases = VClusterReleases(broken, helm_path=plane.bin_dir / "helm", retry_attempts=3,
                                retry_max_wait_seconds=0.2)
    calls_at_start = releases.counters.invocations

    with pytest.raises(TransientHelmError, match="connection refused"):
        asyncio.run(releases.ensure("team", "nowhere", ChartRef(local_path=REAL_VCLUSTER_CHART), "0.36.1", values()))

    assert releases.counters.invocations - calls_at_start == 3


def test_unreachable_chart_repository_is_transient(releases, namespace):
    chart = ChartRef(name="vcluster", repository="https://charts.invalid")  # .invalid never resolves

    with pytest.raises(TransientHelmError, match="charts.invalid"):
        asyncio.run(releases.ensure("team", namespace, chart, "0.36.1", values()))

    assert releases.counters.installs == 0
