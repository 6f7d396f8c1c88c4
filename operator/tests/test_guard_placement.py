"""The guard's placement: GPU pods on the tenant's pool, every other pod on the CPU pool."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import CpuPool, Pool, PoolMode, Toleration
from gputenant.guard.mutation import VISIBLE_DEVICES, mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.decision import Decision, QueueGrant
from gputenant.sharing.base import PodRules

GPU_TAINT = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
CPU_TAINT = Toleration(key="gputenant.io/cpu-only", operator="Exists", effect="NoSchedule")
POOL = Pool(name="shared", mode=PoolMode.TIME_SLICING, gpu_model="A100-80GB", gpu_memory_mi_b=81920,
            node_selector={"gputenant.io/pool": "shared"}, tolerations=[GPU_TAINT],
            time_slicing={"replicas": 4})
OTHER_POOL = Pool(name="other", mode=PoolMode.EXCLUSIVE, gpu_model="H100-80GB", gpu_memory_mi_b=81559,
                  node_selector={"gputenant.io/pool": "other"})
CPU_POOL = CpuPool(node_selector={"gputenant.io/node-role": "cpu"}, tolerations=[CPU_TAINT])
CONFIG = OperatorConfig(pools=[POOL, OTHER_POOL], cpu_pool=CPU_POOL)
DECISION = Decision(trust=Trust.TRUSTED, possible=True, reason="ChosenFromTrust", message="",
                    mode=SharingMode.TIME_SLICING, pool=POOL,
                    queue=QueueGrant(name="team-a", quota=1, limit=2, over_quota_weight=1, priority=100),
                    pod_rules=PodRules(gpu_resources=("nvidia.com/gpu",), max_per_pod={"nvidia.com/gpu": 4},
                                       max_per_container={"nvidia.com/gpu": 1}))


def pod(gpus: bool = False, **spec) -> dict:
    container = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"metadata": {"name": "p", "namespace": "tenant-team-a"}, "spec": {"containers": [container], **spec}}


def mutated(manifest: dict, cpu_pool: CpuPool | None = CPU_POOL) -> dict:
    patch = mutate_pod(manifest, "team-a", DECISION, cpu_pool=cpu_pool)
    return jsonpatch.apply_patch(copy.deepcopy(manifest), patch)


def refusals(manifest: dict) -> list[str]:
    return [v.rule for v in validate_pod(manifest, "team-a", Trust.TRUSTED, DECISION, config=CONFIG)]


def test_a_cpu_pod_goes_to_the_cpu_pool_and_not_to_the_gpu_pool():
    spec = mutated(pod())["spec"]
    assert spec["nodeSelector"] == {"gputenant.io/node-role": "cpu"}
    assert spec["tolerations"] == [{"key": "gputenant.io/cpu-only", "operator": "Exists", "effect": "NoSchedule"}]
    assert "schedulerName" not in spec
    assert {"name": VISIBLE_DEVICES, "value": "void"} in spec["containers"][0]["env"]


def test_a_gpu_pod_goes_to_its_pool_and_not_to_the_cpu_pool():
    spec = mutated(pod(gpus=True))["spec"]
    assert spec["nodeSelector"] == {"gputenant.io/pool": "shared"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["schedulerName"] == "kai-scheduler"


def test_without_a_cpu_pool_a_cpu_pod_is_left_to_the_host_scheduler():
    spec = mutated(pod(), cpu_pool=None)["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec


@pytest.mark.parametrize("gpus", [False, True])
def test_the_placement_the_guard_sets_is_admitted(gpus):
    assert refusals(mutated(pod(gpus=gpus))) == []


@pytest.mark.parametrize("manifest, rule", [
    (pod(nodeSelector={"gputenant.io/pool": "shared"}), "node-selector"),
    (pod(tolerations=[GPU_TAINT.model_dump(exclude_none=True)]), "toleration"),
    (pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gputenant.io/pool", "operator": "In", "values": ["shared"]}]}]}}}),
     "node-affinity"),
    (pod(gpus=True, nodeSelector={"gputenant.io/node-role": "cpu"}), "node-selector"),
    (pod(gpus=True, tolerations=[CPU_TAINT.model_dump(exclude_none=True)]), "toleration"),
    (pod(gpus=True, nodeSelector={"gputenant.io/pool": "other"}), "node-selector"),
], ids=["cpu-pod-asks-for-its-gpu-pool", "cpu-pod-tolerates-gpu-taint", "cpu-pod-affinity-to-gpu-pool",
        "gpu-pod-asks-for-cpu-nodes", "gpu-pod-tolerates-cpu-taint", "gpu-pod-asks-for-another-pool"])
def test_a_pod_naming_nodes_outside_its_placement_is_refused(manifest, rule):
    assert rule in refusals(mutated(manifest))


def _term(**fields) -> dict:
    return {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname", **fields}


def pod_affinity(kind: str, required: list[dict] | None = None, preferred: list[dict] | None = None) -> dict:
    terms: dict = {}
    if required is not None:
        terms["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred is not None:
        terms["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 1, "podAffinityTerm": t} for t in preferred]
    return {kind: terms}


def affinity_messages(manifest: dict) -> list[str]:
    return [v.message for v in validate_pod(manifest, "team-a", Trust.TRUSTED, DECISION, config=CONFIG)
            if v.rule == "pod-affinity-namespace"]


@pytest.mark.parametrize("kind", ["podAffinity", "podAntiAffinity"])
@pytest.mark.parametrize("where", ["required", "preferred"])
def test_pod_affinity_may_not_select_pods_of_other_namespaces(kind, where):
    for term, field in ((_term(namespaceSelector={}), "namespaceSelector"),
                        (_term(namespaceSelector={"matchLabels": {"gputenant.io/tenant": "victim"}}), "namespaceSelector"),
                        (_term(namespaces=["tenant-victim"]), "namespaces"),
                        (_term(namespaces=["tenant-team-a", "tenant-victim"]), "namespaces")):
        [message] = affinity_messages(pod(affinity=pod_affinity(kind, **{where: [term]})))
        path = ("requiredDuringSchedulingIgnoredDuringExecution[0]" if where == "required"
                else "preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm")
        assert message.startswith(f"spec.affinity.{kind}.{path}.{field}")
        assert f"(remove {field}" in message


@pytest.mark.parametrize("kind", ["podAffinity", "podAntiAffinity"])
def test_pod_affinity_within_the_own_namespace_is_admitted(kind):
    own = [_term(), _term(namespaces=["tenant-team-a"]), _term(namespaceSelector=None)]
    assert affinity_messages(pod(affinity=pod_affinity(kind, required=own, preferred=own))) == []


def test_an_update_keeps_a_pod_admitted_before_the_rule():
    old = pod(affinity=pod_affinity("podAffinity", required=[_term(namespaceSelector={})]), nodeName="n")
    assert "pod-affinity-namespace" not in [v.rule for v in validate_pod(
        old, "team-a", Trust.TRUSTED, DECISION, config=CONFIG, operation="UPDATE", old=old)]
