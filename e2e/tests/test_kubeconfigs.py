"""Kubeconfigs issued inside a virtual cluster, checked by using them against its real apiserver.

The virtual cluster is the simulated vCluster (see kubeplane.vcluster_sim): a real kube-apiserver
brought up for a StatefulSet the local chart rendered through Helm; only the vCluster process is
played by the harness.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.helm import ChartRef, VClusterReleases
from gputenant.kubeconfigs import KubeconfigIssueError, issue_kubeconfigs, kubeconfig_secret
from kubeplane.vcluster_sim import VClusterSimulator

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_CHART = REPO_ROOT / "charts" / "vcluster-local"
TOKEN_SECONDS = 3600

pytestmark = pytest.mark.skipif(not (LOCAL_CHART / "Chart.yaml").is_file(),
                                reason=f"the local vcluster chart is missing at {LOCAL_CHART}")


@pytest.fixture(scope="module")
def vcluster(plane):
    """(host namespace, admin kubeconfig from vc-<release>) of one simulated vCluster."""
    namespace = plane.create_namespace(f"kc-{uuid.uuid4().hex[:6]}").metadata.name
    version = str(yaml.safe_load((LOCAL_CHART / "Chart.yaml").read_text())["version"])
    with pytest.MonkeyPatch.context() as patch, VClusterSimulator(plane) as simulator:
        for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            patch.setenv(key, plane.env()[key])
        releases = VClusterReleases(plane.kubeconfig_path, helm_path=plane.bin_dir / "helm")
        asyncio.run(releases.ensure("team", namespace, ChartRef(local_path=LOCAL_CHART), version, {}))
        simulator.wait_for_control_plane("team", namespace)
        yield namespace, simulator.admin_kubeconfig("team", namespace)
        asyncio.run(releases.uninstall("team", namespace))
    with plane.api_client() as api:
        kubernetes.client.CoreV1Api(api).delete_namespace(namespace)


@pytest.fixture(scope="module")
def issued(vcluster):
    _, admin = vcluster
    return {i.role: i for i in asyncio.run(issue_kubeconfigs(admin, ["admin", "view"], TOKEN_SECONDS, None))}


def core_api(kubeconfig_yaml: str) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config_dict(yaml.safe_load(kubeconfig_yaml)))


def create_namespace(core: kubernetes.client.CoreV1Api, name: str) -> int:
    try:
        core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name)))
    except ApiException as error:
        return error.status
    return 201


def test_view_kubeconfig_lists_but_cannot_create(issued):
    view = core_api(issued["view"].kubeconfig_yaml)
    assert "kube-system" in {n.metadata.name for n in view.list_namespace().items}
    assert create_namespace(view, "made-by-view") == 403


def test_admin_kubeconfig_can_create(issued):
    admin = core_api(issued["admin"].kubeconfig_yaml)
    assert create_namespace(admin, "made-by-admin") == 201
    assert "made-by-admin" in {n.metadata.name for n in admin.list_namespace().items}


def test_tokens_expire_as_requested_and_kubeconfigs_hold_no_admin_certificate(issued, vcluster):
    _, admin = vcluster
    now = datetime.now(UTC)
    for kubeconfig in issued.values():
        assert now + timedelta(seconds=TOKEN_SECONDS - 120) < kubeconfig.expires_at <= now + timedelta(seconds=TOKEN_SECONDS)
        config = yaml.safe_load(kubeconfig.kubeconfig_yaml)
        [user] = config["users"]
        assert set(user["user"]) == {"token"}
        [cluster] = config["clusters"]
        assert cluster["cluster"]["certificate-authority-data"] == admin["clusters"][0]["cluster"]["certificate-authority-data"]


def test_issuing_again_is_idempotent_and_old_tokens_stay_valid(issued, vcluster):
    _, admin = vcluster
    [again] = asyncio.run(issue_kubeconfigs(admin, ["view"], TOKEN_SECONDS, None))
    assert again.kubeconfig_yaml != issued["view"].kubeconfig_yaml
    for kubeconfig in (again, issued["view"]):
        assert core_api(kubeconfig.kubeconfig_yaml).list_namespace().items


def test_server_url_is_what_tenants_get(vcluster):
    _, admin = vcluster
    [view] = asyncio.run(issue_kubeconfigs(admin, ["view"], 600, "https://team.gpu.example.com"))
    assert yaml.safe_load(view.kubeconfig_yaml)["clusters"][0]["cluster"]["server"] == "https://team.gpu.example.com"


def test_kubeconfig_secret_is_accepted_by_the_host(plane, vcluster, issued):
    namespace, _ = vcluster
    body = kubeconfig_secret("team", "view", namespace, issued["view"])
    with plane.api_client() as api:
        created = kubernetes.client.CoreV1Api(api).create_namespaced_secret(namespace, body)
    assert created.metadata.name == naming.kubeconfig_secret_name("team", "view")
    assert created.metadata.labels[naming.TENANT_LABEL] == "team"
    expires = created.metadata.annotations[naming.KUBECONFIG_EXPIRES_ANNOTATION]
    assert datetime.strptime(expires, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) == \
        issued["view"].expires_at.replace(microsecond=0)
    assert base64.b64decode(created.data["config"]).decode() == issued["view"].kubeconfig_yaml


def test_bad_input_names_the_field(vcluster):
    _, admin = vcluster
    with pytest.raises(ValueError, match="spec.kubeconfig.roles"):
        asyncio.run(issue_kubeconfigs(admin, ["edit"], 600, None))
    with pytest.raises(ValueError, match="spec.kubeconfig.tokenLifetime"):
        asyncio.run(issue_kubeconfigs(admin, ["view"], 60, None))


def test_unreachable_virtual_cluster_is_transient(vcluster):
    _, admin = vcluster
    broken = yaml.safe_load(yaml.safe_dump(admin))
    broken["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    with pytest.raises(KubeconfigIssueError) as failed:
        asyncio.run(issue_kubeconfigs(broken, ["view"], 600, None))
    assert failed.value.transient
