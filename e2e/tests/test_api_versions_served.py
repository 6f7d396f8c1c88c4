"""GpuTenant served as v1alpha1 (stored, deprecated) and v1beta1 (preferred) by the real API
server, converted by the operator's conversion code (`api.conversion`) behind the CRD's webhook.

Here no operator runs: the webhook is the test process's (kubeplane.conversion), which serves the
operator's own `guard.conversion.ConversionServer`; test_guard_operator.py shows the operator
pointing the CRD at its own port and answering there.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant.api import v1beta1
from gputenant.api.conversion import PRESERVED_PREFIX, convert
from gputenant.api.crd import conversion
from gputenant.api.examples import VALID_CASES
from gputenant.guard.conversion import CRD_NAME
from kubeplane import wait_for
from kubeplane.conversion import point_tenant_crd_here
from kubeplane.process import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUP, PLURAL = "gputenant.io", "gputenants"
VERSIONS = ("v1alpha1", "v1beta1")
HAMI_V1BETA1 = {"apiVersion": f"{GROUP}/v1beta1", "kind": "GpuTenant", "metadata": {"name": "hami-quantity"},
                "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": "a"}],
                         "sharing": {"mode": "HAMi", "hami": {"memory": "1024Gi", "corePercent": 50}}}}


def every_example() -> list[dict]:
    """The API's valid cases, the example files a platform engineer starts from, and a v1beta1
    memory spelled in a unit v1alpha1 cannot hold."""
    files = sorted((REPO_ROOT / "examples").glob("*/*.yaml")) + sorted((REPO_ROOT / "examples").glob("*/*/*.yaml"))
    documents = [doc for path in files for doc in yaml.safe_load_all(path.read_text())]
    return [case.tenant for case in VALID_CASES] + [doc for doc in documents if doc and doc.get("kind") == "GpuTenant"] \
        + [HAMI_V1BETA1]


@pytest.fixture(scope="module")
def custom(plane, crds):
    with plane.api_client() as client:
        yield kubernetes.client.CustomObjectsApi(client)


def read(custom, version: str, name: str) -> dict:
    return custom.get_cluster_custom_object(GROUP, version, PLURAL, name)


def create(custom, body: dict) -> dict:
    version = body["apiVersion"].split("/")[1]
    return custom.create_cluster_custom_object(GROUP, version, PLURAL, body)


def delete_all(custom, names: list[str]) -> None:
    for name in names:
        try:
            custom.delete_cluster_custom_object(GROUP, "v1beta1", PLURAL, name)
        except ApiException as error:
            if error.status != 404:
                raise


def is_within(written, read_back) -> bool:
    """Every field written is read back with the same value (the API server adds defaults)."""
    if isinstance(written, dict):
        return isinstance(read_back, dict) and all(k in read_back and is_within(v, read_back[k]) for k, v in written.items())
    return written == read_back


@pytest.mark.parametrize("written_as", VERSIONS)
def test_every_example_reads_back_identically_through_both_versions(custom, written_as):
    """Every valid example and every example file, written in one version: read in that version it
    holds every field written; read in the other, it is exactly that object converted."""
    names = []
    try:
        for index, example in enumerate(every_example()):
            body = convert(example, written_as)
            body["metadata"] = {"name": f"served-{written_as[1:6]}-{index}"}
            names.append(body["metadata"]["name"])
            create(custom, body)
            same = read(custom, written_as, body["metadata"]["name"])
            other_version = next(v for v in VERSIONS if v != written_as)
            other = read(custom, other_version, body["metadata"]["name"])
            assert is_within(body["spec"], same["spec"]), example["metadata"]["name"]
            assert convert(same, other_version) == other, example["metadata"]["name"]
            assert convert(other, written_as) == same, example["metadata"]["name"]
    finally:
        delete_all(custom, names)


def test_a_v1beta1_spelling_survives_storage_as_v1alpha1(custom):
    name = "served-spelling"
    body = {"apiVersion": f"{GROUP}/v1beta1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": "a"}],
                     "sharing": {"mode": "HAMi", "hami": {"memory": "10240Mi", "corePercent": 50}}}}
    try:
        create(custom, body)
        assert read(custom, "v1beta1", name)["spec"]["sharing"]["hami"] == {"memory": "10240Mi", "corePercent": 50}
        stored = read(custom, "v1alpha1", name)
        assert stored["spec"]["sharing"]["hami"] == {"memoryMiB": 10240, "corePercent": 50}
        assert json.loads(stored["metadata"]["annotations"][PRESERVED_PREFIX + "v1beta1"]) == {
            "spec.sharing.hami.memory": "10240Mi"}
        custom.patch_cluster_custom_object(GROUP, "v1alpha1", PLURAL, name,
                                           {"spec": {"sharing": {"hami": {"memoryMiB": 2048}}}})
        assert read(custom, "v1beta1", name)["spec"]["sharing"]["hami"]["memory"] == "2Gi"
    finally:
        delete_all(custom, [name])


def test_v1alpha1_requests_are_warned_of_the_deprecation(plane, crds):
    name = "served-warned"
    manifest = json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
                           "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "a"}]}})
    try:
        created = plane.kubectl("create", "-f", "-", input=manifest)
        assert f"{GROUP}/v1alpha1 GpuTenant is deprecated; use {GROUP}/v1beta1" in created.stderr
    finally:
        plane.kubectl("delete", f"{PLURAL}.v1alpha1.{GROUP}", name, "--ignore-not-found")


def take_the_webhook_down(plane, custom, name: str) -> None:
    """Point the CRD's conversion webhook at a port nothing listens on, and wait until the API
    server uses it (it rebuilds a CRD's handler asynchronously): a read of `name` in the version
    it is not stored in (v1alpha1) fails."""
    [dead_port] = free_ports(1)
    with plane.api_client() as client:
        kubernetes.client.ApiextensionsV1Api(client).patch_custom_resource_definition(CRD_NAME, {"spec": {
            "conversion": conversion({"service": None, "url": f"https://127.0.0.1:{dead_port}/convert"})}})

    def refused() -> bool:
        try:
            read(custom, "v1alpha1", name)
        except ApiException as error:
            return error.status == 500 and "conversion webhook" in (error.body or "")
        return False
    wait_for(refused, timeout=30, interval=0.2, what="the API server to use the dead conversion webhook")


def bring_the_webhook_back(plane, custom, name: str) -> None:
    """The CRD's conversion back at this process's webhook, in use: a v1alpha1 read of `name` answers."""
    with plane.api_client() as client:
        point_tenant_crd_here(client)

    def answered() -> bool:
        try:
            return bool(read(custom, "v1alpha1", name))
        except ApiException as error:
            if error.status == 500:
                return False
            raise
    wait_for(answered, timeout=30, interval=0.2, what="the API server to use the conversion webhook again")


def test_with_no_conversion_webhook_the_stored_version_still_answers(plane, custom):
    """What clients see while no operator replica answers: the CRD's webhook is pointed at a port
    nothing listens on (the API server is refused a connection, as when the guard's Service has
    no ready endpoint). Reads and writes of the stored version (v1beta1, also what plain kubectl
    uses) work on a tenant only ever written in it; anything that must be converted fails with the
    API server's own error naming the conversion webhook."""
    name = "served-outage"
    stored = {"apiVersion": f"{GROUP}/v1beta1", "kind": "GpuTenant", "metadata": {"name": name},
              "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "a"}]}}
    try:
        create(custom, stored)
        take_the_webhook_down(plane, custom, name)
        assert read(custom, "v1beta1", name)["spec"]["trust"] == "Trusted"
        listed = plane.kubectl("get", "gput", name, "-o", "name")
        assert listed.stdout.strip() == f"gputenant.{GROUP}/{name}"
        custom.patch_cluster_custom_object(GROUP, "v1beta1", PLURAL, name, {"spec": {"displayName": "kept"}})
        refused = plane.kubectl("get", f"{PLURAL}.v1alpha1.{GROUP}", name, check=False)
        assert refused.returncode != 0
        assert "conversion webhook for gputenant.io/v1beta1, Kind=GpuTenant failed" in refused.stderr, refused.stderr
        with pytest.raises(ApiException) as written:
            create(custom, {**convert(stored, "v1alpha1"), "metadata": {"name": "served-outage-alpha"}})
        assert written.value.status == 500 and "conversion webhook" in (written.value.body or "")
    finally:
        with plane.api_client() as client:
            point_tenant_crd_here(client)
        delete_all(custom, [name, "served-outage-alpha"])


def test_an_outage_write_in_the_stored_version_drops_managed_fields_of_both_versions(plane, custom):
    """The API server's own behaviour, which docs/api-versions.md warns of (kubernetes/kubernetes
    #136919, fixed upstream by #136949 but present in the pinned v1.35.4): a tenant applied as
    v1alpha1 (an older Git repository), then, with no conversion webhook, a merge patch in the
    stored v1beta1 succeeds and the API server drops every managedFields entry; a later server-side
    apply then meets a conflict with `before-first-apply`."""
    name = "served-fields"
    alpha = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
             "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "a"}]}}
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-", input=json.dumps(alpha))
        managers = [(m["manager"], m["apiVersion"]) for m in read(custom, "v1beta1", name)["metadata"]["managedFields"]]
        assert managers == [("gitops", f"{GROUP}/v1alpha1")]
        take_the_webhook_down(plane, custom, name)
        custom.patch_cluster_custom_object(GROUP, "v1beta1", PLURAL, name, {"spec": {"displayName": "by hand"}})
        assert not read(custom, "v1beta1", name)["metadata"].get("managedFields")
        bring_the_webhook_back(plane, custom, name)
        reapplied = plane.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-", check=False,
                                  input=json.dumps({**alpha, "spec": {**alpha["spec"], "displayName": "from git"}}))
        assert reapplied.returncode != 0 and 'conflict with "before-first-apply"' in reapplied.stderr, reapplied.stderr
    finally:
        with plane.api_client() as client:
            point_tenant_crd_here(client)
        delete_all(custom, [name])


@pytest.mark.parametrize("memory", ["127Mi", "1025Gi", "10.5Mi", "0.5Ti", "10737418240"])
def test_the_api_server_refuses_a_v1beta1_memory_v1alpha1_could_not_hold(custom, memory):
    body = {**HAMI_V1BETA1, "metadata": {"name": "served-bad-memory"}}
    body["spec"] = {**body["spec"], "sharing": {"mode": "HAMi", "hami": {"memory": memory}}}
    with pytest.raises(ApiException) as refused:
        create(custom, body)
    assert refused.value.status == 422
    assert "spec.sharing.hami.memory" in (refused.value.body or "")
    # pydantic refuses the same values (operator/tests/test_conversion.py)
    assert not v1beta1.is_share_memory(memory)
