"""fleet.view: what the hub shows of a tenant (status.fleet and Ready), and the kubeconfig copies it
hands the tenant's owners, and them only."""

from __future__ import annotations

import pytest

from gputenant import naming
from gputenant.api.hub import GpuTenant
from gputenant.api.placement import FleetStatus
from gputenant.api.status import ConditionStatus
from gputenant.config.models import OperatorConfig
from gputenant.fleet.placement import Placement
from gputenant.fleet.view import (
    COPIED_FROM_LABEL,
    SOURCE_ANNOTATION,
    hub_status,
    kubeconfig_copy,
    kubeconfig_objects,
    tracked,
    wanted_kubeconfigs,
)
from gputenant.reconcile.steps.namespace import operator_access_binding

CONFIG = OperatorConfig()
PLACED = Placement("east", "Placed", "placed on east: pool h100 (Exclusive) has 8 of 8 GPUs free for gpu.quota 1")
UNPLACED = Placement(None, "NoMemberFits", "no member can take the tenant (east: Cordoned: cordoned)")


def member_tenant(*conditions: dict, **status) -> dict:
    return {"metadata": {"name": "team-a"}, "status": {"conditions": list(conditions), **status}}


def tenant(**spec) -> GpuTenant:
    return GpuTenant.model_validate({
        "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": "team-a", "uid": "u"},
        "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "ml"}],
                 "members": [{"kind": "User", "name": "bob", "role": "admin"},
                             {"kind": "ServiceAccount", "name": "ci", "namespace": "ci", "role": "edit"}], **spec}})


def by_kind(objects: list[dict]) -> dict[str, dict]:
    assert len({obj["kind"] for obj in objects}) == len(objects)
    return {obj["kind"]: obj for obj in objects}


# -- status.fleet and Ready ----------------------------------------------------------------------

def test_an_unplaced_tenant_is_not_ready_for_the_placements_reason():
    fleet, ready = hub_status(UNPLACED, None, None, member_read=False)
    assert fleet == {"reason": "NoMemberFits", "message": UNPLACED.message}
    assert ready == (ConditionStatus.FALSE, "NoMemberFits", UNPLACED.message)


def test_a_tenant_on_an_unreachable_member_is_unknown_and_names_the_member():
    fleet, ready = hub_status(PLACED, None, "no answer from https://east:6443 within 5s", member_read=False)
    assert fleet == {"reason": "Placed", "message": PLACED.message, "cluster": "east"}
    assert ready == (ConditionStatus.UNKNOWN, "MemberUnreachable",
                     "member east cannot be read: no answer from https://east:6443 within 5s; "
                     "nothing is moved or deleted")


def test_an_unreachable_member_ignores_a_member_tenant_read_before():
    stale = member_tenant({"type": "Ready", "status": "True", "reason": "TenantReady", "message": "ok"})
    fleet, (status, reason, _) = hub_status(PLACED, stale, None, member_read=False)
    assert (status, reason) == (ConditionStatus.UNKNOWN, "MemberUnreachable") and "member" not in fleet


def test_a_placed_tenant_not_on_its_member_yet_is_delivering():
    fleet, ready = hub_status(PLACED, None, None, member_read=True)
    assert fleet["cluster"] == "east" and "member" not in fleet
    assert ready == (ConditionStatus.UNKNOWN, "Delivering",
                     "placed on east; waiting for Argo CD to deliver the tenant there")


def test_a_delivered_tenant_without_ready_waits_for_the_members_operator():
    other = {"type": "QuotaReady", "status": "True", "reason": "Applied", "message": ""}
    fleet, ready = hub_status(PLACED, member_tenant(other), None, member_read=True)
    assert fleet["member"] == {}
    assert ready == (ConditionStatus.UNKNOWN, "Delivering", "east: its operator has not reported yet")


@pytest.mark.parametrize("status", ["True", "False", "Unknown"])
def test_the_member_tenants_ready_is_mirrored_with_the_members_name(status):
    condition = {"type": "Ready", "status": status, "reason": "WaitingForControlPlane", "message": "vCluster starting"}
    fleet, ready = hub_status(PLACED, member_tenant(condition), None, member_read=True)
    assert ready == (ConditionStatus(status), "WaitingForControlPlane", "east: vCluster starting")
    assert fleet == {"reason": "Placed", "message": PLACED.message, "cluster": "east",
                     "member": {"ready": status, "reason": "WaitingForControlPlane", "message": "vCluster starting"}}


def test_a_member_ready_without_reason_or_message_reads_as_member_status():
    _, ready = hub_status(PLACED, member_tenant({"type": "Ready", "status": "False"}), None, member_read=True)
    assert ready == (ConditionStatus.FALSE, "MemberStatus", "east: ")


@pytest.mark.parametrize(("placement", "member", "read"), [
    (UNPLACED, None, False), (PLACED, None, False), (PLACED, None, True),
    (PLACED, member_tenant(), True),
    (PLACED, member_tenant({"type": "Ready", "status": "True", "reason": "TenantReady", "message": "up"}), True),
])
def test_status_fleet_fits_the_api(placement, member, read):
    fleet, _ = hub_status(placement, member, "down", member_read=read)
    assert FleetStatus.model_validate(fleet).model_dump(by_alias=True, exclude_none=True) == fleet


def test_the_same_member_state_gives_the_same_status():
    """An unchanged fleet costs no status write."""
    condition = {"type": "Ready", "status": "True", "reason": "TenantReady", "message": "up"}
    assert hub_status(PLACED, member_tenant(condition), None, True) == hub_status(
        PLACED, member_tenant(dict(condition)), None, True)


# -- kubeconfig copies ---------------------------------------------------------------------------

def test_the_owners_only_may_get_the_tenants_kubeconfig_copies():
    objects = kubeconfig_objects(tenant(), CONFIG, None)
    assert [obj["kind"] for obj in objects] == ["Namespace", "Role", "RoleBinding"]
    kinds = by_kind(objects)
    namespace = kinds["Namespace"]["metadata"]
    assert namespace["name"] == "tenant-team-a"
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    role, binding = kinds["Role"], kinds["RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "tenant-team-a"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                              "resourceNames": ["team-a-kubeconfig-admin", "team-a-kubeconfig-view"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    subjects = {(s["kind"], s["name"]) for s in binding["subjects"]}
    assert subjects == {("User", "alice"), ("Group", "ml")}


def test_a_tenant_without_kubeconfig_roles_gets_no_role_on_secrets():
    """A Role with no resourceNames would grant every Secret of the namespace."""
    objects = kubeconfig_objects(tenant(kubeconfig={"roles": []}), CONFIG, None)
    assert [obj["kind"] for obj in objects] == ["Namespace"]


def test_one_kubeconfig_role_is_the_one_secret_granted():
    role = by_kind(kubeconfig_objects(tenant(kubeconfig={"roles": ["view"]}), CONFIG, None))["Role"]
    assert role["rules"][0]["resourceNames"] == ["team-a-kubeconfig-view"]


def test_the_operators_access_comes_after_the_namespace_and_before_the_owners_role():
    config = OperatorConfig(namespace_prefix="t-", tenant_namespace_cluster_role="gputenant-tenant-namespace",
                            operator_service_account="gpu-tenant-operator")
    access = operator_access_binding(config, naming.host_namespace("team-a", config))
    objects = kubeconfig_objects(tenant(), config, access)
    assert objects[0]["metadata"]["name"] == "t-team-a"
    assert objects[1] == access and access["metadata"]["namespace"] == "t-team-a"
    assert [obj["kind"] for obj in objects[2:]] == ["Role", "RoleBinding"]


def test_a_copy_holds_the_config_key_only_and_says_where_it_came_from():
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "team-a-kubeconfig-admin", "namespace": "tenant-team-a", "resourceVersion": "42",
                           "labels": {"x": "y"}, "ownerReferences": [{"kind": "GpuTenant", "name": "team-a"}]},
              "data": {"config": "a3ViZWNvbmZpZw==", "token": "c2VjcmV0", "ca.crt": "Y2E="}}
    copy = kubeconfig_copy("team-a", CONFIG, "east", secret)
    assert copy["data"] == {"config": "a3ViZWNvbmZpZw=="}
    assert (copy["kind"], copy["type"]) == ("Secret", "Opaque")
    metadata = copy["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("team-a-kubeconfig-admin", "tenant-team-a")
    assert "ownerReferences" not in metadata and "resourceVersion" not in metadata
    assert metadata["labels"][COPIED_FROM_LABEL] == "east"
    assert metadata["labels"][naming.TENANT_LABEL] == "team-a"
    assert metadata["annotations"] == {SOURCE_ANNOTATION: "east/tenant-team-a/team-a-kubeconfig-admin@42"}


def test_a_copy_of_a_secret_without_config_is_empty():
    copy = kubeconfig_copy("team-a", CONFIG, "east", {"metadata": {"name": "team-a-kubeconfig-view"}})
    assert copy["data"] == {"config": ""}


def test_wanted_kubeconfigs_are_those_the_hub_tenants_roles_name_never_what_the_member_says():
    issued = member_tenant(kubeconfigs=[
        {"role": "admin", "secretName": "team-a-kubeconfig-admin", "expiresAt": "2026-01-03T00:00:00Z"},
        {"role": "view", "secretName": "team-a-kubeconfig-view"}, {"role": "view"},
        {"role": "admin", "secretName": "argocd-secret"}, "not-an-entry"])
    wanted = wanted_kubeconfigs(tenant(kubeconfig={"roles": ["admin"]}), issued)
    assert list(wanted) == ["team-a-kubeconfig-admin"]
    assert '"expiresAt": "2026-01-03T00:00:00Z"' in wanted["team-a-kubeconfig-admin"]
    assert list(wanted_kubeconfigs(tenant(kubeconfig={"roles": ["admin", "view"]}), issued)) == [
        "team-a-kubeconfig-admin", "team-a-kubeconfig-view"]
    assert wanted_kubeconfigs(tenant(), member_tenant()) == {}
    assert wanted_kubeconfigs(tenant(), None) == {}


def test_only_the_tenant_the_fleets_application_delivered_is_tracked():
    delivered = {"metadata": {"name": "team-a", "annotations": {
        "argocd.argoproj.io/tracking-id": "gputenant-team-a:gputenant.io/GpuTenant:/team-a"}}}
    assert tracked(delivered, "gputenant-team-a")
    assert not tracked(delivered, "gputenant-team-b")
    assert not tracked({"metadata": {"name": "team-a"}}, "gputenant-team-a")


def test_a_moving_tenant_keeps_its_old_cluster_and_is_unknown():
    moving = Placement("east", "Moving", "its placement was withdrawn: placed again once east no longer has it")
    fleet, ready = hub_status(moving, None, None, member_read=True)
    assert fleet["cluster"] == "east" and ready[:2] == (ConditionStatus.UNKNOWN, "Moving")


def test_a_member_message_longer_than_a_condition_holds_is_cut_where_the_condition_cuts_it():
    huge = member_tenant({"type": "Ready", "status": "False", "reason": "HelmFailed", "message": "x" * 40000})
    _, (_, _, message) = hub_status(PLACED, huge, None, member_read=True)
    assert len(message) == 32768 and message.startswith("east: x")
