"""Gangs through vCluster: the guard names a tenant-scoped PodGroup for the pods of one virtual owner."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool, PoolMode
from gputenant.guard.gangs import (
    POD_GROUP_ANNOTATION,
    VIRTUAL_OWNERS_ANNOTATION,
    GangError,
    admitted_gang,
    gang_name,
    guard_gang,
    membership_patch,
    pod_group,
)
from gputenant.guard.keys import GANG_SIZE_ANNOTATION
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.decision import Decision, QueueGrant
from gputenant.sharing.base import PodRules

POOL = Pool(name="exclusive", mode=PoolMode.EXCLUSIVE, gpu_model="H100-80GB", gpu_memory_mi_b=81559,
            node_selector={"gputenant.io/pool": "exclusive"})
CONFIG = OperatorConfig(pools=[POOL])
DECISION = Decision(trust=Trust.UNTRUSTED, possible=True, reason="ChosenFromTrust", message="",
                    mode=SharingMode.EXCLUSIVE, pool=POOL,
                    queue=QueueGrant(name="tenant-team-a", quota=4, limit=4, over_quota_weight=1, priority=100),
                    pod_rules=PodRules(gpu_resources=("nvidia.com/gpu",), max_per_pod={"nvidia.com/gpu": 8}))
JOB_UID = "0b6c4f6e-3f0a-4f7e-9a53-3c1d2e4f5a6b"


def owners(uid: str = JOB_UID, kind: str = "Job") -> str:
    return json.dumps([{"apiVersion": "batch/v1", "kind": kind, "name": "train", "uid": uid, "controller": True}])


def pod(gang: str | None = "4", owner: str | None = owners(), gpus: bool = True, **annotations) -> dict:
    if gang is not None:
        annotations[GANG_SIZE_ANNOTATION] = gang
    if owner is not None:
        annotations[VIRTUAL_OWNERS_ANNOTATION] = owner
    container = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"metadata": {"name": "train-x-default-x-team-a", "namespace": "tenant-team-a",
                         "annotations": annotations}, "spec": {"containers": [container]}}


def admitted(manifest: dict, tenant: str = "team-a") -> tuple[dict, list[str]]:
    """The pod as the guard leaves it, and the rules it breaks then (empty: admitted)."""
    patched = jsonpatch.apply_patch(copy.deepcopy(manifest), mutate_pod(manifest, tenant, DECISION))
    return patched, [v.rule for v in validate_pod(patched, tenant, Trust.UNTRUSTED, DECISION, config=CONFIG)]


def test_pods_of_one_virtual_job_join_one_gang_pod_group_on_the_tenant_queue():
    first, refused = admitted(pod())
    second, _ = admitted(pod())
    assert refused == [] and guard_gang(first, "team-a") == f"gang.team-a.{JOB_UID}"
    name = first["metadata"]["annotations"][POD_GROUP_ANNOTATION]
    assert name == second["metadata"]["annotations"][POD_GROUP_ANNOTATION] == f"gang.team-a.{JOB_UID}"
    group = pod_group(stored(first, "uid-1"), "team-a", "tenant-team-a", "tenant-team-a")
    assert group["metadata"] == {"name": name, "namespace": "tenant-team-a", "labels": {
        "gputenant.io/tenant": "team-a", "kai.scheduler/queue": "tenant-team-a"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": first["metadata"]["name"], "uid": "uid-1"}]}
    assert group["spec"] == {"minMember": 4, "queue": "tenant-team-a"}
    assert group["apiVersion"] == "scheduling.run.ai/v2alpha2" and group["kind"] == "PodGroup"


def test_another_tenant_naming_the_same_virtual_owner_gets_its_own_gang():
    """KAI v0.12 keys PodGroups by name across namespaces: the tenant's name keeps gangs apart."""
    mine, _ = admitted(pod(), tenant="team-a")
    theirs, _ = admitted(pod(), tenant="team-b")
    assert mine["metadata"]["annotations"][POD_GROUP_ANNOTATION] != \
        theirs["metadata"]["annotations"][POD_GROUP_ANNOTATION]
    assert gang_name(pod(), "team-b").startswith("gang.team-b.")


def test_pods_without_a_gang_request_are_left_to_the_pod_grouper():
    patched, refused = admitted(pod(gang=None))
    assert POD_GROUP_ANNOTATION not in patched["metadata"]["annotations"] and refused == []


@pytest.mark.parametrize("manifest", [
    pod(**{POD_GROUP_ANNOTATION: f"gang.team-b.{JOB_UID}"}),
    pod(gang=None, **{POD_GROUP_ANNOTATION: f"gang.team-a.{JOB_UID}"}),
    pod(gang=None, owner=None, **{POD_GROUP_ANNOTATION: "pg-someone-else"}),
], ids=["another-tenants-gang", "own-gang-name-without-request", "plain-group-name"])
def test_a_pod_group_name_the_tenant_writes_is_refused_and_applies_no_group(manifest):
    patched, refused = admitted(manifest)
    assert patched["metadata"]["annotations"][POD_GROUP_ANNOTATION] == \
        manifest["metadata"]["annotations"][POD_GROUP_ANNOTATION]
    assert "scheduler-key" in refused
    assert guard_gang(patched, "team-a") is None


@pytest.mark.parametrize("manifest, message", [
    (pod(gang="1"), "from 2 to 1024"),
    (pod(gang="four"), "from 2 to 1024"),
    (pod(gang="5000"), "from 2 to 1024"),
    (pod(owner=None), "without an owner in the virtual cluster"),
    (pod(owner="not json"), "without an owner in the virtual cluster"),
    (pod(owner=owners(uid="../../x")), "without an owner in the virtual cluster"),
    (pod(gpus=False), "only GPU pods are gang-scheduled"),
])
def test_a_gang_request_the_guard_cannot_honour_is_refused_with_the_fix(manifest, message):
    patched, refused = admitted(manifest)
    assert POD_GROUP_ANNOTATION not in patched["metadata"]["annotations"]
    assert "gang" in refused
    violations = validate_pod(patched, "team-a", Trust.UNTRUSTED, DECISION, config=CONFIG)
    assert any(message in v.message for v in violations if v.rule == "gang")


def test_gang_name_needs_a_virtual_owner():
    with pytest.raises(GangError, match=GANG_SIZE_ANNOTATION):
        gang_name(pod(owner=json.dumps([{"kind": "Job"}])), "team-a")


def test_a_cluster_admin_member_writes_from_the_platform_side():
    """A controller run with an admin certificate (the local plane's KAI) may annotate pods it groups."""
    from gputenant.guard.webhook import Guard

    guard = Guard(CONFIG, client=None)
    assert guard.by_tenant({"username": "kai-podgrouper", "groups": ["system:masters"]}, "tenant-team-a") is False
    assert guard.by_tenant({"username": "kai-podgrouper", "groups": ["kai"]}, "tenant-team-a") is True


def stored(manifest: dict, uid: str, name: str | None = None) -> dict:
    """The pod as the API server stores it: with its uid (and a name of its own)."""
    result = copy.deepcopy(manifest)
    result["metadata"].update(uid=uid, name=name or result["metadata"]["name"])
    return result


def test_the_mutating_webhook_has_no_side_effects():
    """Admission decides and patches; the operator writes a gang's PodGroup after admission (guard.gang_groups)."""
    from gputenant.guard import webhook
    from gputenant.guard.configuration import webhook_configurations

    mutating, _ = webhook_configurations(CONFIG, {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="})
    assert {hook["sideEffects"] for hook in mutating["webhooks"]} == {"None"}
    assert not hasattr(webhook.Guard, "apply_gang")


def test_the_operator_groups_only_the_gang_the_guard_admitted():
    member, refused = admitted(pod())
    assert refused == [] and admitted_gang(stored(member, "u"), "team-a") == ("team-a", "tenant-team-a")
    assert admitted_gang(stored(member, "u"), "team-b") is None, "another tenant's namespace"
    assert admitted_gang(stored(member, "u"), None) is None, "a namespace of no tenant"
    unqueued = copy.deepcopy(member)
    del unqueued["metadata"]["labels"]["kai.scheduler/queue"]
    for other in (unqueued, admitted(pod(gang=None))[0], admitted(pod(gang="1"))[0]):
        assert admitted_gang(stored(other, "u"), "team-a") is None


def test_each_member_is_one_more_owner_and_an_owner_is_written_once():
    member, _ = admitted(pod())
    first, second = stored(member, "uid-1", "train-a"), stored(member, "uid-2", "train-b")
    group = pod_group(first, "team-a", "tenant-team-a", "tenant-team-a")
    group["metadata"]["resourceVersion"] = "7"
    assert membership_patch(group, first) is None
    patch = membership_patch(group, second)
    assert patch == {"metadata": {"resourceVersion": "7", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "train-a", "uid": "uid-1"},
        {"apiVersion": "v1", "kind": "Pod", "name": "train-b", "uid": "uid-2"}]}}
    assert all("controller" not in owner for owner in patch["metadata"]["ownerReferences"])
