"""Kubeconfigs issued inside a virtual cluster, checked by using them against it.

The virtual cluster is a REAL vCluster: a tenant the operator drives to Ready on the plane's node
(see conftest.py); its admin kubeconfig is the one vCluster wrote to ``vc-<release>``, dialled at
the tenant's NodePort endpoint as the operator dials it (`with_server`).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.kubeconfigs import KubeconfigIssueError, issue_kubeconfigs, kubeconfig_secret
from gputenant.kubeconfigs.tokens import admin_kubeconfig, with_server

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

TENANT = "kc-team"
TOKEN_SECONDS = 3600


@pytest.fixture(scope="module")
def vcluster(plane, tenants_api):
    """(host namespace, admin kubeconfig from vc-<release>) of one real vCluster."""
    tenants_api.apply(tenants_api.manifest(TENANT, "Trusted", owner=f"{TENANT}-owner"))
    body = tenants_api.wait_ready(TENANT)
    namespace = f"tenant-{TENANT}"
    with plane.api_client() as api:
        secret = api.sanitize_for_serialization(kubernetes.client.CoreV1Api(api).read_namespaced_secret(
            f"vc-{naming.release_name(TENANT)}", namespace))
    return namespace, with_server(admin_kubeconfig(secret), body["status"]["vcluster"]["endpoint"])


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


def test_kubeconfig_secret_is_accepted_by_the_host(plane, issued):
    """In a namespace of its own: the tenant's namespace already holds the operator's Secrets."""
    namespace = plane.create_namespace(f"kc-{uuid.uuid4().hex[:6]}").metadata.name
    body = kubeconfig_secret("team", "view", namespace, issued["view"])
    with plane.api_client() as api:
        try:
            created = kubernetes.client.CoreV1Api(api).create_namespaced_secret(namespace, body)
        finally:
            kubernetes.client.CoreV1Api(api).delete_namespace(namespace)
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
