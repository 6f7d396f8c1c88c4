"""Unit tests of rendering: tenant + hand-built decision + config -> the host objects (the vCluster
values: test_render_vcluster_values.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant, SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.policy.decision import Decision, QueueGrant
from gputenant.render import RenderError, render_parent_queues, render_tenant
from gputenant.render.quantities import cpu_millicores, memory_megabytes
from gputenant.sharing.base import PodRules

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_VALUES_SCHEMA = REPO_ROOT / ".." / "shared" / "third_party" / "vcluster-0.36.1" / "values.schema.json"
UPSTREAM_QUEUE_CRD = REPO_ROOT / ".." / "shared" / "third_party" / "kai-scheduler-v0.12.17" / "scheduling.run.ai_queues.yaml"

CONFIG = OperatorConfig(operator_namespace="gpu-ops")
POOLS = {
    SharingMode.TIME_SLICING: Pool.model_validate({
        "name": "ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
        "nodeSelector": {"gputenant.io/pool": "ts"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "timeSlicing": {"replicas": 4}}),
    SharingMode.HAMI: Pool.model_validate({
        "name": "hami", "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 23034,
        "nodeSelector": {"gputenant.io/pool": "hami", "gpu": "on"}, "hami": {}}),
    SharingMode.MIG: Pool.model_validate({
        "name": "mig", "mode": "MIG", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559,
        "nodeSelector": {"gputenant.io/pool": "mig"},
        "tolerations": [{"key": "gputenant.io/untrusted", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "dedicated", "operator": "Equal", "value": "ext", "effect": "NoSchedule"}],
        "mig": {"config": "all-1g.10gb", "profiles": ["1g.10gb"]}}),
}
GRANTS = {
    SharingMode.TIME_SLICING: {"requests.nvidia.com/gpu": "8"},
    SharingMode.HAMI: {"requests.nvidia.com/gpu": "0"},
    SharingMode.MIG: {"requests.nvidia.com/mig-1g.10gb": "14"},
}
TRUST_OF_MODE = {SharingMode.TIME_SLICING: Trust.TRUSTED, SharingMode.HAMI: Trust.INTERNAL,
                 SharingMode.MIG: Trust.UNTRUSTED}


def tenant(name: str = "team-a", trust: Trust = Trust.UNTRUSTED, **spec) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": name}, "spec": {
        "trust": trust.value, "owners": [{"kind": "User", "name": "alice"}], **spec}})


def decision(sharing: SharingMode, trust: Trust | None = None, **changes) -> Decision:
    """A possible decision for `sharing` on its test pool; `changes` override fields."""
    mode = sharing
    fields = dict(
        trust=trust or TRUST_OF_MODE[mode], possible=True, reason="ExplicitMode", message="test", mode=mode,
        pool=POOLS[mode], quota=GRANTS[mode],
        queue=QueueGrant(name="team-a", quota=2, limit=3.5, over_quota_weight=3, priority=200, parent="research"),
        pod_rules=PodRules(gpu_resources=("nvidia.com/gpu",)))
    fields.update(changes)
    return Decision(**fields)


def impossible(trust: Trust) -> Decision:
    return Decision(trust=trust, possible=False, reason="NoPoolForMode", message="no MIG pool")


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    [obj] = by_kind(objects, kind)
    return obj


@pytest.fixture(scope="module")
def upstream_schema() -> dict:
    if not UPSTREAM_VALUES_SCHEMA.is_file():
        pytest.skip(f"upstream vcluster values schema absent at {UPSTREAM_VALUES_SCHEMA}")
    return json.loads(UPSTREAM_VALUES_SCHEMA.read_text())


# -- objects -----------------------------------------------------------------------------------

def test_objects_come_in_apply_order_with_tenant_and_trust_labels():
    rendered = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG)
    kinds = [obj["kind"] for obj in rendered.objects]
    assert kinds == ["Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy",
                     "Role", "Role", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "ConfigMap",
                     "Queue"]
    for obj in rendered.objects:
        labels = obj["metadata"]["labels"]
        assert labels[naming.TENANT_LABEL] == "team-a", obj["kind"]
        assert labels[naming.TRUST_LABEL] == "Untrusted", obj["kind"]
        assert labels[naming.MANAGED_BY_LABEL] == naming.MANAGED_BY, obj["kind"]
        if obj["kind"] not in ("Namespace", "Queue"):
            assert obj["metadata"]["namespace"] == "tenant-team-a", obj["kind"]
        else:
            assert "namespace" not in obj["metadata"]


@pytest.mark.parametrize("trust, level", [(Trust.UNTRUSTED, "restricted"), (Trust.INTERNAL, "baseline"),
                                          (Trust.TRUSTED, "baseline")])
def test_namespace_pod_security_follows_trust(trust, level):
    mode = {Trust.UNTRUSTED: SharingMode.MIG, Trust.INTERNAL: SharingMode.HAMI,
            Trust.TRUSTED: SharingMode.TIME_SLICING}[trust]
    rendered = render_tenant(tenant(trust=trust), decision(mode), CONFIG)
    labels = one(rendered.objects, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == level
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.34"
    assert rendered.vcluster_values["policies"]["podSecurityStandard"] == level


@pytest.mark.parametrize("mode", [SharingMode.TIME_SLICING, SharingMode.HAMI, SharingMode.MIG])
def test_quota_has_namespace_limits_and_the_decisions_gpu_entries(mode):
    spec = {"quotas": {"cpu": "8", "memory": "32Gi", "pods": 40, "storage": "1Ti", "services": 5}}
    hard = one(render_tenant(tenant(**spec), decision(mode), CONFIG).objects, "ResourceQuota")["spec"]["hard"]
    assert hard == {"limits.cpu": "8", "requests.cpu": "8", "limits.memory": "32Gi", "requests.memory": "32Gi",
                    "requests.storage": "1Ti", "pods": "40", "services": "5",
                    "count/podgroups.scheduling.run.ai": "40", "services.loadbalancers": "0",
                    "services.nodeports": "0", **GRANTS[mode]}


def test_limit_range_takes_the_spec_defaults():
    spec = {"quotas": {"limitRange": {"defaultCpu": "2", "defaultMemory": "3Gi", "defaultRequestCpu": "250m",
                                      "defaultRequestMemory": "512Mi"}}}
    [limit] = one(render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).objects,
                  "LimitRange")["spec"]["limits"]
    assert limit == {"type": "Container", "default": {"cpu": "2", "memory": "3Gi"},
                     "defaultRequest": {"cpu": "250m", "memory": "512Mi"}}


def test_impossible_decision_renders_only_namespace_rbac_and_a_zero_gpu_quota():
    rendered = render_tenant(tenant(), impossible(Trust.UNTRUSTED), CONFIG)
    assert [obj["kind"] for obj in rendered.objects] == [
        "Namespace", "ResourceQuota", "Role", "Role", "Role", "Role", "Role", "RoleBinding", "RoleBinding",
        "RoleBinding", "ConfigMap"]
    assert one(rendered.objects, "ResourceQuota")["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert rendered.vcluster_values is None


# -- RBAC --------------------------------------------------------------------------------------

def _secret_rules(role: dict) -> list[dict]:
    return [rule for rule in role["rules"] if "secrets" in rule["resources"]]


def test_only_the_owners_read_exactly_the_issued_kubeconfig_secrets():
    spec = {"kubeconfig": {"roles": ["view"]}, "members": [{"kind": "User", "name": "bob", "role": "admin"}]}
    objects = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).objects
    roles = {role["metadata"]["name"]: role for role in by_kind(objects, "Role")}
    assert _secret_rules(roles["gputenant-view"]) == _secret_rules(roles["gputenant-edit"]) == []
    assert _secret_rules(roles["gputenant-admin"]) == [], "admin members do not read kubeconfigs"
    assert _secret_rules(roles["gputenant-kubeconfigs"]) == [{
        "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["team-a-kubeconfig-view"], "verbs": ["get"]}]
    bindings = {b["metadata"]["name"]: b for b in by_kind(objects, "RoleBinding")}
    readers = [b for b in bindings.values() if b["roleRef"]["name"] == "gputenant-kubeconfigs"]
    assert readers == [bindings["gputenant-kubeconfigs-owners"]]
    assert readers[0]["subjects"] == [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]


def test_no_kubeconfig_roles_means_no_secret_rule_at_all():
    """An empty resourceNames list would grant every Secret, vc-<release> included."""
    objects = render_tenant(tenant(kubeconfig={"roles": []}), decision(SharingMode.MIG), CONFIG).objects
    assert all(not _secret_rules(role) for role in by_kind(objects, "Role"))


def test_view_edit_admin_are_cumulative():
    objects = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).objects
    roles = {role["metadata"]["name"]: role["rules"] for role in by_kind(objects, "Role")}
    assert roles["gputenant-edit"][:len(roles["gputenant-view"])] == roles["gputenant-view"]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]} in roles["gputenant-edit"]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]} not in roles["gputenant-view"]
    assert roles["gputenant-admin"][:len(roles["gputenant-edit"])] == roles["gputenant-edit"]


def test_owners_bind_to_admin_and_members_to_their_role():
    spec = {"owners": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "leads"}],
            "members": [{"kind": "ServiceAccount", "name": "ci", "namespace": "ci", "role": "edit"},
                        {"kind": "User", "name": "bob"}]}
    bindings = {b["metadata"]["name"]: b for b in
                by_kind(render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).objects, "RoleBinding")}
    assert set(bindings) == {"gputenant-owners", "gputenant-wake-owners", "gputenant-kubeconfigs-owners",
                             "gputenant-members-edit", "gputenant-members-view"}
    assert bindings["gputenant-wake-owners"]["subjects"] == bindings["gputenant-owners"]["subjects"]
    assert bindings["gputenant-kubeconfigs-owners"]["subjects"] == bindings["gputenant-owners"]["subjects"]
    assert bindings["gputenant-owners"]["roleRef"]["name"] == "gputenant-admin"
    assert bindings["gputenant-owners"]["subjects"] == [
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "leads", "apiGroup": "rbac.authorization.k8s.io"}]
    assert bindings["gputenant-members-edit"]["subjects"] == [{"kind": "ServiceAccount", "name": "ci", "namespace": "ci"}]
    assert bindings["gputenant-members-view"]["roleRef"]["name"] == "gputenant-view"


# -- queue -------------------------------------------------------------------------------------

def test_queue_uses_kai_units_and_explicit_limits():
    queue = one(render_tenant(tenant(displayName="Team A", quotas={"cpu": "1500m", "memory": "64Gi"}),
                              decision(SharingMode.MIG), CONFIG).objects, "Queue")
    assert queue["apiVersion"] == "scheduling.run.ai/v2"
    assert queue["metadata"]["name"] == naming.queue_name("team-a")
    assert queue["spec"] == {
        "displayName": "Team A", "parentQueue": "research", "priority": 200,
        "resources": {
            "gpu": {"quota": 2, "limit": 3.5, "overQuotaWeight": 3},
            "cpu": {"quota": 1500, "limit": 1500, "overQuotaWeight": 3},
            "memory": {"quota": 68719.476736, "limit": 68719.476736, "overQuotaWeight": 3},
        }}


def test_a_tenant_queue_without_parent_is_a_policy_bug():
    """KAI v0.12 never schedules from a top-level queue: the policy always names a parent."""
    grant = QueueGrant(name="team-a", quota=1, limit=1, over_quota_weight=1, priority=100)
    with pytest.raises(RenderError, match="without a queue grant or its parent queue"):
        render_tenant(tenant(), decision(SharingMode.MIG, queue=grant), CONFIG)


def test_parent_queues_are_top_level_unlimited_by_default_and_labelled_without_a_tenant():
    config = OperatorConfig.model_validate({"defaultParentQueue": "tenants", "parentQueues": [
        "research",
        {"name": "training", "displayName": "Training", "priority": 200,
         "resources": {"gpu": {"quota": 8, "limit": 16.5, "overQuotaWeight": 2}, "memory": {"quota": 0}}}]})
    queues = render_parent_queues(config)
    assert [q["metadata"]["name"] for q in queues] == ["research", "training", "tenants"]
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    for queue in queues:
        assert queue["apiVersion"] == "scheduling.run.ai/v2" and queue["kind"] == "Queue"
        assert queue["metadata"]["labels"] == {naming.MANAGED_BY_LABEL: naming.MANAGED_BY,
                                               naming.COMPONENT_LABEL: "parent-queue"}
        assert "parentQueue" not in queue["spec"]
    assert queues[0]["spec"] == {"displayName": "research", "priority": 100,
                                 "resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}
    assert queues[1]["spec"] == {"displayName": "Training", "priority": 200, "resources": {
        "gpu": {"quota": 8, "limit": 16.5, "overQuotaWeight": 2}, "cpu": unlimited,
        "memory": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}}


def test_a_declared_default_parent_queue_is_rendered_once_as_declared():
    config = OperatorConfig.model_validate({"defaultParentQueue": "research", "parentQueues": [
        {"name": "research", "resources": {"gpu": {"quota": 4}}}]})
    [queue] = render_parent_queues(config)
    assert queue["spec"]["resources"]["gpu"] == {"quota": 4, "limit": -1, "overQuotaWeight": 1}


def test_parent_queues_match_the_upstream_queue_crd():
    crd = yaml.safe_load(UPSTREAM_QUEUE_CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v2"]
    config = OperatorConfig.model_validate({"parentQueues": [
        {"name": "training", "resources": {"gpu": {"quota": 0.5, "limit": 2}}}]})
    for queue in render_parent_queues(config):
        jsonschema.validate(queue, version["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("value, millicores", [("16", 16000), ("500m", 500), ("0.25", 250), ("2.5", 2500)])
def test_cpu_millicores(value, millicores):
    assert cpu_millicores(value, "f") == millicores


@pytest.mark.parametrize("value, megabytes", [("1G", 1000), ("1Gi", 1073.741824), ("500M", 500), ("2000000", 2)])
def test_memory_megabytes(value, megabytes):
    assert memory_megabytes(value, "f") == megabytes


def test_bad_quantity_names_the_field():
    with pytest.raises(RenderError, match=r"^spec\.quotas\.memory: '64 gigs' is not a Kubernetes quantity"):
        memory_megabytes("64 gigs", "spec.quotas.memory")
