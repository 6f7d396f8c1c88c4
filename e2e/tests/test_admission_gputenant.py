"""The GpuTenant CRD in a real kube-apiserver: the invalid tenants of the shared table are rejected
at the field they name, valid ones are stored with the same defaults pydantic applies, and updates
are held to the same rules.

Requests use fieldValidation=Strict, as kubectl does: unknown fields are then rejected (with 400,
the API server's status for a body it cannot decode strictly); without it they are only pruned.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gputenant import GROUP, PLURAL
from gputenant.api.examples import INVALID_CASES, VALID_CASES, InvalidCase, minimal_tenant
from gputenant.api.group import HUB_VERSION as VERSION  # the bodies here are the hub's (v1alpha1) shape
from gputenant.api.v1alpha1 import GpuTenant
from kubeplane.fixtures import install_crds
from kubeplane.tools import REPO_ROOT

CRD_FILE = REPO_ROOT / "crds" / "tenant.yaml"


@pytest.fixture(scope="module")
def custom(plane):
    install_crds(plane, CRD_FILE)
    with plane.api_client() as api:
        yield client.CustomObjectsApi(api)


def unique_name(base: str) -> str:
    return f"{base[:30]}-{uuid.uuid4().hex[:6]}"


def renamed(tenant: dict, name: str) -> dict:
    tenant = copy.deepcopy(tenant)
    tenant["metadata"]["name"] = name
    return tenant


def create(custom: client.CustomObjectsApi, tenant: dict, **options) -> dict:
    return custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, tenant, field_validation="Strict", **options)


def delete(custom: client.CustomObjectsApi, name: str) -> None:
    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def rejection(call) -> tuple[int, str]:
    """Status and message of the API server's refusal; fails the test if it accepted."""
    with pytest.raises(ApiException) as raised:
        stored = call()
        pytest.fail(f"the API server accepted {json.dumps(stored)}")
    return raised.value.status, json.loads(raised.value.body)["message"]


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda case: case.id)
def test_api_server_rejects_invalid_tenant_at_the_field(custom, case: InvalidCase):
    tenant = case.tenant
    if case.path != "metadata.name":
        tenant = renamed(tenant, unique_name(case.id))
    try:
        status, message = rejection(lambda: create(custom, tenant))
    finally:
        if status_of_get(custom, tenant["metadata"]["name"]) == 200:
            delete(custom, tenant["metadata"]["name"])
    assert status == (400 if case.unknown_field else 422), message
    assert case.path in message, f"message does not name {case.path}: {message}"
    if case.message:
        assert case.message in message


def status_of_get(custom: client.CustomObjectsApi, name: str) -> int:
    try:
        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        return 200
    except ApiException as error:
        return error.status


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda case: case.id)
def test_api_server_stores_valid_tenant_with_pydantic_defaults(custom, case):
    tenant = renamed(case.tenant, unique_name(case.tenant["metadata"]["name"]))
    create(custom, tenant)
    try:
        stored = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, tenant["metadata"]["name"])
    finally:
        delete(custom, tenant["metadata"]["name"])
    expected = GpuTenant.model_validate(tenant).spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert stored["spec"] == expected
    assert GpuTenant.from_body(stored).spec == GpuTenant.model_validate(tenant).spec


def test_unknown_fields_are_pruned_without_strict_validation(custom):
    """Clients that do not ask for Strict lose unknown fields silently; the schema keeps them out
    of storage either way."""
    tenant = renamed(minimal_tenant(), unique_name("pruned"))
    tenant["spec"]["gpu"] = {"quota": 1, "count": 2}
    stored = custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, tenant)
    delete(custom, tenant["metadata"]["name"])
    assert "count" not in stored["spec"]["gpu"] and stored["spec"]["gpu"]["quota"] == 1


def test_update_is_held_to_the_trust_rules(custom):
    name = unique_name("update")
    create(custom, renamed(minimal_tenant(sharing={"mode": "TimeSlicing"}), name))
    try:
        status, message = rejection(lambda: custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"spec": {"trust": "Untrusted"}}))
        assert status == 422 and "spec.sharing.mode" in message and "Untrusted tenants need hardware isolation" in message
        assert custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)["spec"]["trust"] == "Trusted"

        patched = custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"spec": {"trust": "Untrusted", "sharing": {"mode": "MIG"}}})
        assert patched["spec"]["trust"] == "Untrusted" and patched["spec"]["sharing"]["mode"] == "MIG"

        status, message = rejection(lambda: custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"spec": {"sharing": {"mode": "Exclusive"}, "gpu": {"quota": 0.5}}}))
        assert status == 422 and "spec.gpu.quota" in message
    finally:
        delete(custom, name)


def ready_condition(reason: str) -> dict:
    return {"type": "Ready", "status": "False", "reason": reason, "message": "waiting for the vCluster",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}


def test_status_is_strict_and_shown_in_printer_columns(plane, custom):
    name = unique_name("status")
    create(custom, renamed(minimal_tenant(gpu={"quota": 2}), name))
    try:
        status = {"status": {"observedGeneration": 1, "namespace": f"tenant-{name}",
                             "sharing": {"mode": "TimeSlicing", "pool": "a100-ts", "reason": "ChosenFromTrust"},
                             "conditions": [ready_condition("VClusterPending")]}}
        custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, status)

        code, message = rejection(lambda: custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, {"status": {"conditions": [ready_condition("not one word")]}}))
        assert code == 422 and "status.conditions[0].reason" in message

        table = plane.kubectl("get", "gput", name, "-o", "wide").stdout.split()
        assert table[:10] == ["NAME", "TRUST", "SHARING", "GPUS", "READY", "REASON", "AGE", "POOL", "NAMESPACE", name]
        assert table[10:14] == ["Trusted", "TimeSlicing", "2", "False"] and table[14] == "VClusterPending"
        assert table[-2:] == ["a100-ts", f"tenant-{name}"]
    finally:
        delete(custom, name)


def test_kubectl_explain_shows_the_model_descriptions(plane, custom):
    explained = plane.kubectl("explain", "gputenants.spec.sharing.mode").stdout
    assert "Untrusted tenants may only use MIG or" in " ".join(explained.split())
