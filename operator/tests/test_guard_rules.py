"""The admission guard's pure rules: exact patches and exact violations per sharing mode."""

from __future__ import annotations

import copy

import pytest

from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.pools import HamiPool, MigPool, Pool, PoolMode, TimeSlicingPool, Toleration
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.pods import pod_gpu_amounts
from gputenant.guard.rules import Violation, rejection_message, validate_pod
from gputenant.policy.decision import Decision, QueueGrant
from gputenant.sharing.base import PodRules
from kubeplane import builders

TAINT = Toleration(key="gputenant.io/pool", operator="Equal", value="shared", effect="NoSchedule")


def decision(mode: SharingMode, trust: Trust, rules: PodRules, **pool_fields) -> Decision:
    pool = Pool(name=f"{mode.value.lower()}-pool", mode=PoolMode(mode.value), gpu_model="A100-80GB",
                gpu_memory_mi_b=81920, node_selector={"gputenant.io/pool": "p1"}, tolerations=[TAINT],
                **pool_fields)
    return Decision(trust=trust, possible=True, reason="ChosenFromTrust", message="", mode=mode, pool=pool,
                    queue=QueueGrant(name="team-a", quota=1, limit=2, over_quota_weight=1, priority=100),
                    pod_rules=rules)


TIME_SLICING = decision(SharingMode.TIME_SLICING, Trust.TRUSTED, PodRules(
    gpu_resources=("nvidia.com/gpu",), max_per_pod={"nvidia.com/gpu": 4},
    max_per_container={"nvidia.com/gpu": 1}, allow_fraction_annotations=True, forbid_isolation_overrides=False),
    time_slicing=TimeSlicingPool(replicas=4))
HAMI = decision(SharingMode.HAMI, Trust.INTERNAL, PodRules(
    gpu_resources=("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
    max_per_pod={"nvidia.com/gpu": 2}),
    hami=HamiPool())
MIG = decision(SharingMode.MIG, Trust.UNTRUSTED, PodRules(
    gpu_resources=("nvidia.com/mig-1g.10gb",), max_per_pod={"nvidia.com/mig-1g.10gb": 2}),
    mig=MigPool(config="all-1g.10gb", profiles=["1g.10gb"]))


def pod(*containers: dict, labels=None, annotations=None, **spec) -> dict:
    return builders.pod(*(containers or [container()]), labels=labels, annotations=annotations,
                        metadata={"name": "p", "namespace": "tenant-team-a"}, **spec)


def container(name="main", gpus=None, **fields) -> dict:
    return builders.container(name, gpus, image="busybox", **fields)


def apply_patch(document: dict, patch: list[dict]) -> dict:
    """RFC 6902 add/replace, enough to read the guard's patches as their result."""
    result = copy.deepcopy(document)
    for operation in patch:
        assert operation["op"] in ("add", "replace")
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        target = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target.append(operation["value"]) if last == "-" else target.insert(int(last), operation["value"])
        else:
            target[last] = operation["value"]
    return result


def test_gpu_pod_gets_queue_scheduler_pool_and_tolerations():
    original = pod(container(gpus={"nvidia.com/gpu": "1"}))
    patched = apply_patch(original, mutate_pod(original, "team-a", TIME_SLICING))
    assert patched["metadata"]["labels"] == {"kai.scheduler/queue": "team-a"}
    assert patched["spec"]["schedulerName"] == "kai-scheduler"
    assert patched["spec"]["nodeSelector"] == {"gputenant.io/pool": "p1"}
    assert patched["spec"]["tolerations"] == [
        {"key": "gputenant.io/pool", "operator": "Equal", "value": "shared", "effect": "NoSchedule"}]
    assert validate_pod(patched, "team-a", Trust.TRUSTED, TIME_SLICING) == []


def test_mutation_keeps_what_the_tenant_set_and_appends_to_existing_lists():
    original = pod(container(gpus={"nvidia.com/gpu": "1"}), labels={"app": "x"},
                   nodeSelector={"zone": "a"}, tolerations=[{"key": "other", "operator": "Exists"}],
                   schedulerName="default-scheduler")
    patched = apply_patch(original, mutate_pod(original, "team-a", TIME_SLICING))
    assert patched["metadata"]["labels"] == {"app": "x", "kai.scheduler/queue": "team-a"}
    assert patched["spec"]["nodeSelector"] == {"zone": "a", "gputenant.io/pool": "p1"}
    assert [t["key"] for t in patched["spec"]["tolerations"]] == ["other", "gputenant.io/pool"]
    assert patched["spec"]["schedulerName"] == "kai-scheduler"
    assert mutate_pod(patched, "team-a", TIME_SLICING) == []


def test_non_gpu_pods_are_not_steered_to_the_gpu_pool_and_see_no_gpu():
    """The vCluster control plane and CoreDNS share the namespace; they stay on ordinary nodes, and
    should one land on a GPU node, the NVIDIA runtime shows it no GPU."""
    patched = apply_patch(pod(), mutate_pod(pod(), "team-a", MIG))
    assert patched == pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
                                    securityContext={"capabilities": {"drop": ["NET_RAW"]}}))
    assert validate_pod(patched, "team-a", Trust.UNTRUSTED, MIG) == []


def test_update_only_restores_the_queue_label():
    original = pod(container(gpus={"nvidia.com/gpu": "1"}))
    assert mutate_pod(original, "team-a", TIME_SLICING, operation="UPDATE") == [
        {"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/queue": "team-a"}}]


@pytest.mark.parametrize("decision_, trust, manifest, expected", [
    (TIME_SLICING, Trust.TRUSTED, pod(container(gpus={"nvidia.com/gpu": "2"})),
     [Violation("per-container-limit", "container main requests 2 nvidia.com/gpu; at most 1 per container "
                "(time-sliced replicas add no compute; the pool fails larger requests)")]),
    (TIME_SLICING, Trust.TRUSTED, pod(*[container(f"c{i}", gpus={"nvidia.com/gpu": "1"}) for i in range(5)]),
     [Violation("per-pod-limit", "the pod requests 5 nvidia.com/gpu; the tenant's limit is 4 per pod")]),
    (TIME_SLICING, Trust.TRUSTED, pod(container(gpus={"nvidia.com/gpu": "1"}), labels={"kai.scheduler/queue": "team-b"}),
     [Violation("queue-label", "label kai.scheduler/queue=team-b names another queue; pods of this tenant use "
                "queue team-a (remove the label)")]),
    (TIME_SLICING, Trust.TRUSTED, pod(container(env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}])), []),
    (HAMI, Trust.INTERNAL, pod(container(env=[{"name": "CUDA_DEVICE_SM_LIMIT_0", "value": "100"}])),
     [Violation("isolation-env", "container main sets CUDA_DEVICE_SM_LIMIT_0, which overrides GPU isolation "
                "(remove the variable)")]),
    (HAMI, Trust.INTERNAL, pod(container(gpus={"nvidia.com/mig-1g.10gb": "1"})),
     [Violation("gpu-resource", "nvidia.com/mig-1g.10gb belongs to another sharing mechanism than HAMi; request "
                "nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpucores")]),
    (HAMI, Trust.INTERNAL, pod(container(), annotations={"gpu-fraction": "0.5"}),
     [Violation("fraction-annotation", "annotation gpu-fraction asks KAI for a shared GPU, which sharing HAMi "
                "does not allow (remove it)")]),
    (MIG, Trust.UNTRUSTED, pod(container(gpus={"nvidia.com/mig-3g.40gb": "1"})),
     [Violation("mig-profile", "MIG profile 3g.40gb is not granted to the tenant; request nvidia.com/mig-1g.10gb")]),
    (MIG, Trust.UNTRUSTED, pod(container(), nodeName="gpu-1", hostPID=True),
     [Violation("node-name", "spec.nodeName gpu-1 bypasses the scheduler and the tenant's pool (remove spec.nodeName)"),
      Violation("host-namespaces", "spec.hostPID shares the node's namespaces with the pod (remove spec.hostPID)")]),
    (MIG, Trust.UNTRUSTED, pod(container(), initContainers=[container("init", securityContext={"privileged": True})]),
     [Violation("privileged", "init container init is privileged; privileged containers see every GPU of the "
                "node (remove securityContext.privileged)")]),
    (MIG, Trust.UNTRUSTED, pod(container(), schedulerName="my-scheduler"),
     [Violation("scheduler-name", "schedulerName my-scheduler is not allowed; pods of this tenant are placed by "
                "default-scheduler or kai-scheduler (remove schedulerName)")]),
])
def test_violations(decision_, trust, manifest, expected):
    patched = apply_patch(manifest, mutate_pod(manifest, "team-a", decision_))
    assert validate_pod(patched, "team-a", trust, decision_) == expected


def test_gpu_pod_on_an_impossible_policy_is_rejected_with_the_policy_message():
    impossible = Decision(trust=Trust.UNTRUSTED, possible=False, reason="NoPoolForMode",
                          message="no MIG pool has A100-80GB GPUs")
    gpu_pod = pod(container(gpus={"nvidia.com/gpu": "1"}, securityContext={"capabilities": {"drop": ["ALL"]}}))
    violations = validate_pod(gpu_pod, "team-a", Trust.UNTRUSTED, impossible)
    assert violations == [Violation("gpu-not-granted", "the pod asks for GPUs but the tenant's GPU policy cannot "
                                    "be applied: no MIG pool has A100-80GB GPUs")]
    cpu_pod = pod(container(securityContext={"capabilities": {"drop": ["ALL"]}}))
    assert validate_pod(cpu_pod, "team-a", Trust.UNTRUSTED, impossible) == []


def test_node_name_is_not_checked_on_update_of_a_bound_pod():
    bound = apply_patch(pod(container(gpus={"nvidia.com/mig-1g.10gb": "1"})),
                        mutate_pod(pod(container(gpus={"nvidia.com/mig-1g.10gb": "1"})), "team-a", MIG))
    bound["spec"]["nodeName"] = "gpu-1"
    assert validate_pod(bound, "team-a", Trust.UNTRUSTED, MIG, operation="UPDATE") == []


def test_effective_pod_amount_counts_sidecars_and_the_largest_init_container():
    manifest = pod(container(gpus={"nvidia.com/gpu": "1"}), initContainers=[
        container("setup", gpus={"nvidia.com/gpu": "3"}),
        container("sidecar", gpus={"nvidia.com/gpu": "1"}, restartPolicy="Always")])
    assert {k: int(v) for k, v in pod_gpu_amounts(manifest).items()} == {"nvidia.com/gpu": 3}


def test_rejection_message_names_rules_and_policy():
    message = rejection_message([Violation("privileged", "x"), Violation("node-name", "y")], "team-a",
                                Trust.UNTRUSTED, MIG)
    assert message == "[privileged] x; [node-name] y (tenant team-a: trust Untrusted, sharing MIG on pool mig-pool)"
