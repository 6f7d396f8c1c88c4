"""The guard's rule registry: the docs' rule table is the registry, and each rule refuses what it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputenant.api.v1alpha1 import GpuTenantSpec, Trust
from gputenant.config.models import OperatorConfig
from gputenant.guard import keys
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import RULES, STRICT, rule_table, validate_pod
from gputenant.policy.choose import decide
from kubeplane.builders import placed_pool as pool

DOC = Path(__file__).resolve().parents[2] / "docs" / "admission-guard.md"
POOL = "gputenant.io/pool"


CONFIG = OperatorConfig.model_validate({"pools": [
    pool("ts", "TimeSlicing", timeSlicing={"replicas": 4}), pool("hami", "HAMi"),
    pool("mig", "MIG", mig={"config": "all-1g.10gb", "profiles": ["1g.10gb"]})],
    "guard": {"runtimeClassNames": ["gvisor"], "deviceClasses": ["granted"], "priorityClassNames": ["batch"]}})


def tenant(trust: Trust):
    spec = GpuTenantSpec.model_validate({"trust": trust.value, "owners": [{"kind": "User", "name": "o"}],
                                         "gpu": {"quota": 1, "limit": 1}})
    return decide("team", spec, CONFIG)


def test_the_docs_rule_table_is_the_registry():
    assert rule_table() in DOC.read_text(), (
        "docs/admission-guard.md's rule table differs from the registry; run `make generate`")


def test_every_rule_has_an_id_a_summary_and_trust_levels():
    assert all(r.id and r.refuses and r.trust for r in RULES.values())
    assert {r.id for r in RULES.values() if r.trust == STRICT} == {"isolation-env", "hami-preload"}


def refused(manifest: dict, trust: Trust = Trust.INTERNAL, operation: str = "CREATE", old=None,
            by_tenant: bool = True) -> list[str]:
    decision = tenant(trust)
    patched = manifest
    if operation == "CREATE":
        import jsonpatch
        patched = jsonpatch.apply_patch(manifest, mutate_pod(manifest, "team", decision))
    return sorted({v.rule for v in validate_pod(patched, "team", trust, decision, operation=operation, old=old,
                                                 config=CONFIG, by_tenant=by_tenant)})


def pod(*, labels=None, annotations=None, container=None, **spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "tenant-team", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "image": "app", **(container or {})}], **spec}}


@pytest.mark.parametrize("rule_id, manifest", [
    ("scheduler-key", pod(labels={"project": "other-team"})),
    ("scheduler-key", pod(labels={"kai.scheduler/preemptibility": "non-preemptible"})),
    ("scheduler-key", pod(labels={"priorityClassName": "inference"})),
    ("scheduler-key", pod(annotations={"pod-group-name": "pg-of-someone"})),
    ("scheduler-key", pod(annotations={"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,81920,100"})),
    ("scheduler-key", pod(annotations={"kai.scheduler/skip-podgrouper": "true"})),
    ("priority-class", pod(priorityClassName="system-node-critical")),
    ("resource-name", pod(container={"resources": {"limits": {"amd.com/gpu": "1"}}})),
    ("resource-name", pod(container={"resources": {"limits": {"other.deviceclass.resource.k8s.io/devices": "1"}}})),
    ("resource-claim", pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "all-gpus"}])),
    ("node-selector", pod(nodeSelector={POOL: "mig"})),
    ("node-affinity", pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["mig"]}]}]}}})),
    ("node-affinity", pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}})),
    ("toleration", pod(tolerations=[{"operator": "Exists"}])),
    ("toleration", pod(tolerations=[{"key": POOL, "operator": "Exists", "effect": "NoSchedule"}])),
    ("node-name", pod(nodeName="gpu-node")),
    ("runtime-class", pod(runtimeClassName="nvidia")),
    ("device-env", pod(container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})),
    ("device-env", pod(container={"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]})),
    ("isolation-env", pod(container={"env": [{"name": "LD_PRELOAD", "value": "/x.so"}]})),
    ("isolation-env", pod(container={"env": [{"name": "ACTIVE_OOM_KILLER", "value": "false"}]})),
    ("env-from", pod(container={"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
    ("env-from", pod(container={"envFrom": [{"prefix": "CUDA_", "configMapRef": {"name": "cfg"}}]})),
    ("env-from", pod(container={"envFrom": [{"prefix": "C", "configMapRef": {"name": "cfg"}}]})),
    ("hami-preload", pod(container={"volumeMounts": [{"name": "v", "mountPath": "/etc"}]})),
    ("hami-preload", pod(container={"volumeMounts": [{"name": "v", "mountPath": "/etc/ld.so.preload",
                                                      "subPath": "empty"}]})),
    ("pod-field", pod(futureField={"a": 1})),
])
def test_each_rule_refuses_its_attack(rule_id, manifest):
    assert refused(manifest) == [rule_id]


@pytest.mark.parametrize("manifest", [
    pod(labels={"app": "x", "kai.scheduler/queue": "team"}),
    pod(annotations={"nvidia.com/use-gputype": "A100"}),
    pod(priorityClassName="batch"),
    pod(runtimeClassName="gvisor"),
    pod(container={"resources": {"limits": {"granted.deviceclass.resource.k8s.io/devices": "1", "cpu": "1",
                                            "hugepages-2Mi": "2Mi"}}}),
    pod(container={"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}],
                   "envFrom": [{"prefix": "APP_", "configMapRef": {"name": "cfg"}}]}),
    pod(container={"volumeMounts": [{"name": "v", "mountPath": "/tmp"}]}),
    pod(tolerations=[{"key": "spot", "operator": "Exists"}]),
])
def test_what_tenants_may_say_passes(manifest):
    assert refused(manifest) == []


def test_trusted_tenants_may_tune_hami_core_but_not_gpu_visibility():
    assert refused(pod(container={"env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]}), Trust.TRUSTED) == []
    assert refused(pod(container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
                   Trust.TRUSTED) == ["device-env"]


def test_update_refuses_only_what_it_adds_and_lets_platform_controllers_write_their_keys():
    old = pod(labels={"kai.scheduler/queue": "team"}, nodeName="gpu-node")
    grouped = pod(labels={"kai.scheduler/queue": "team"}, annotations={"pod-group-name": "pg-p"}, nodeName="gpu-node")
    assert refused(grouped, operation="UPDATE", old=old, by_tenant=False) == []
    assert refused(grouped, operation="UPDATE", old=old) == ["scheduler-key"]
    assert refused(pod(labels={"kai.scheduler/queue": "team", "project": "x"}, nodeName="gpu-node"),
                   operation="UPDATE", old=old) == ["scheduler-key"]
    tolerant = pod(labels={"kai.scheduler/queue": "team"}, nodeName="gpu-node", tolerations=[{"operator": "Exists"}])
    assert refused(tolerant, operation="UPDATE", old=old) == ["toleration"]


def test_protected_keys_cover_the_queue_and_kai_grouping():
    assert {"kai.scheduler/queue", "project", "priorityClassName", "kai.scheduler/preemptibility"} <= set(
        keys.PROTECTED_LABELS)
    assert "pod-group-name" in keys.PROTECTED_ANNOTATIONS


def test_only_the_ephemeral_containers_a_request_adds_are_blinded():
    old = pod(ephemeralContainers=[{"name": "first", "image": "cuda"}])
    new = pod(ephemeralContainers=[{"name": "first", "image": "cuda"}, {"name": "second", "image": "cuda"}])
    assert mutate_pod(new, "team", tenant(Trust.TRUSTED), operation="UPDATE", subresource="ephemeralcontainers",
                      old=old) == [{"op": "add", "path": "/spec/ephemeralContainers/1/env",
                                    "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]},
                                   {"op": "add", "path": "/spec/ephemeralContainers/1/securityContext",
                                    "value": {"capabilities": {"drop": ["NET_RAW"]}}}]
