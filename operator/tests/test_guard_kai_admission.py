"""KAI's own admission (v0.12.0) against the guard: a fraction pod as it leaves KAI's mutating webhook is
admitted, and every piece of that shape a tenant could set or bend to see more of a GPU is refused
(docs/threat-model.md, "KAI's GPU-sharing ConfigMaps"). Decisions come from `decide` on examples/config.yaml;
the pod is mutated by the guard, then by KAI (`kai_sharing.with_kai_shape`), then validated, as the
apiserver orders them."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard import kai_sharing
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.choose import decide

EXAMPLE = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")
HOST_NAME = "infer-x-default-x-shares"
"""How vCluster names the tenant's pod `infer` of namespace `default` in the host namespace."""
PREFIX = f"{HOST_NAME}-b2x9kzq-shared-gpu"
INTERNAL = {"trust": "Internal", "gpu": {"quota": 2}, "sharing": {"mode": "HAMi", "hami": {"corePercent": 25}}}
TRUSTED = {"trust": "Trusted", "gpu": {"quota": 2}, "sharing": {"mode": "TimeSlicing"}}
UNTRUSTED = {"trust": "Untrusted", "gpu": {"quota": 1}}


def tenant(spec: dict) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": "shares"},
                                     "spec": {"owners": [{"kind": "User", "name": "dana"}], **spec}})


def share_pod(name: str = HOST_NAME, fraction: str | None = "0.25", **metadata) -> dict:
    annotations = {"gpu-fraction": fraction} if fraction else {}
    return {"metadata": {"name": name, "namespace": "tenant-shares", "annotations": annotations, **metadata},
            "spec": {"containers": [{"name": "infer", "image": "busybox"}, {"name": "log", "image": "busybox"}]}}


def after_kai(pod: dict, spec: dict = INTERNAL, prefix: str = PREFIX) -> tuple[dict, GpuTenant]:
    """The pod after the guard's mutation and then KAI's."""
    model = tenant(spec)
    decision = decide("shares", model.spec, EXAMPLE)
    assert decision.possible, decision.message
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    return kai_sharing.with_kai_shape(mutated, prefix), model


def violations(pod: dict, model: GpuTenant, *, old: dict | None = None) -> list[tuple[str, str]]:
    decision = decide("shares", model.spec, EXAMPLE)
    found = validate_pod(pod, "shares", model.spec.trust, decision, config=EXAMPLE,
                         operation="UPDATE" if old else "CREATE", old=old)
    return [(v.rule, v.message) for v in found]


def rules_of(pod: dict, model: GpuTenant, **kwargs) -> set[str]:
    return {rule for rule, _ in violations(pod, model, **kwargs)}


@pytest.mark.parametrize("spec", [INTERNAL, TRUSTED], ids=["internal-hami", "trusted-time-slicing"])
def test_the_shape_kais_admission_gives_a_fraction_pod_is_admitted(spec):
    pod, model = after_kai(share_pod(fraction="0.25" if spec is INTERNAL else "0.5"), spec)
    assert violations(pod, model) == []


def test_the_prefix_may_be_cut_from_a_long_name_or_taken_from_the_first_owner():
    long_name = "a-very-long-inference-server-name-x-default-x-shares"
    pod, model = after_kai(share_pod(long_name), prefix=f"{long_name[:33]}-ccccccc-shared-gpu")
    assert violations(pod, model) == []
    owned = share_pod(ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "job-a", "uid": "1"}])
    pod, model = after_kai(owned, prefix="job-a-ddddddd-shared-gpu")
    assert violations(pod, model) == []


@pytest.mark.parametrize("prefix", [
    "other-pod-x-default-x-shares-b2x9kzq-shared-gpu",  # another pod's ConfigMaps: its GPU, not ours
    "evil-x-default-x-shares",  # a ConfigMap the tenant syncs in through vCluster
    f"{HOST_NAME}-b2x9kz-shared-gpu",  # not KAI's 7 random characters
    f"{HOST_NAME}-aeiou11-shared-gpu",  # characters KAI's random never uses
    f"{HOST_NAME}-b2x9kzq-shared-gpu-0-evar",
    "",
], ids=["other-pod", "synced-configmap", "short-random", "foreign-alphabet", "suffixed", "empty"])
def test_a_prefix_kai_would_not_generate_for_this_pod_is_refused_with_everything_hung_on_it(prefix):
    pod, model = after_kai(share_pod(), prefix=prefix)
    found = violations(pod, model)
    assert {rule for rule, _ in found} == {"kai-sharing", "device-env", "env-from", "isolation-env"}
    [message] = [m for rule, m in found if rule == "kai-sharing"]
    assert f"'{HOST_NAME}-<7 random>-shared-gpu'" in message and "tenants may not" in message


def test_a_trusted_tenant_is_refused_the_device_variable_and_envfrom_of_a_foreign_prefix():
    pod, model = after_kai(share_pod(fraction="0.5"), TRUSTED, prefix="evil-x-default-x-shares")
    assert rules_of(pod, model) == {"kai-sharing", "device-env", "env-from"}


def test_the_annotation_on_a_pod_without_a_fraction_is_refused():
    pod = share_pod(fraction=None)
    pod["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] = PREFIX
    assert ("kai-sharing", "annotation runai/shared-gpu-configmap names KAI GPU-sharing ConfigMaps, but the pod asks "
                           "for no GPU fraction (remove it)") in violations(pod, tenant(INTERNAL))


def test_kais_shape_without_a_fraction_is_refused():
    pod, model = after_kai(share_pod())
    del pod["metadata"]["annotations"]["gpu-fraction"]
    assert {"kai-sharing", "device-env", "env-from", "isolation-env"} <= rules_of(pod, model)


def test_kais_shape_is_refused_where_fractions_are_not_granted():
    pod, model = after_kai(share_pod(fraction=None), UNTRUSTED)
    pod["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    assert {"fraction-annotation", "device-env", "env-from", "isolation-env"} <= rules_of(pod, model)


def test_a_literal_device_list_in_place_of_kais_reference_is_refused():
    pod, model = after_kai(share_pod())
    env = pod["spec"]["containers"][0]["env"]
    env[[v["name"] for v in env].index("NVIDIA_VISIBLE_DEVICES")] = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
    assert rules_of(pod, model) == {"device-env"}


@pytest.mark.parametrize("reference", [
    {"configMapKeyRef": {"name": "evil-x-default-x-shares", "key": "NVIDIA_VISIBLE_DEVICES"}},
    {"configMapKeyRef": {"name": f"{PREFIX}-0", "key": "ALL_GPUS"}},
    {"configMapKeyRef": {"name": f"{PREFIX}-0", "key": "NVIDIA_VISIBLE_DEVICES", "optional": True}},
    {"secretKeyRef": {"name": f"{PREFIX}-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
], ids=["other-configmap", "other-key", "optional", "secret"])
def test_the_device_variable_from_anything_but_the_pods_own_configmap_key_is_refused(reference):
    pod, model = after_kai(share_pod())
    env = pod["spec"]["containers"][0]["env"]
    env[[v["name"] for v in env].index("NVIDIA_VISIBLE_DEVICES")]["valueFrom"] = reference
    assert rules_of(pod, model) == {"device-env"}


def test_kais_variables_in_another_container_are_refused():
    pod, model = after_kai(share_pod())
    pod["spec"]["containers"][1]["env"] = copy.deepcopy(pod["spec"]["containers"][0]["env"])
    found = violations(pod, model)
    assert ("device-env", "container log sets NVIDIA_VISIBLE_DEVICES, which chooses the GPUs the container sees "
                          "(remove the variable)") in found
    assert ("isolation-env", "container log sets GPU_PORTION, which overrides GPU isolation (remove the variable)") \
        in found


@pytest.mark.parametrize("source", [
    {"configMapRef": {"name": "evil-x-default-x-shares"}},
    {"configMapRef": {"name": f"{PREFIX}-0-evar", "optional": True}},
    {"configMapRef": {"name": f"{PREFIX}-0"}},
    {"secretRef": {"name": f"{PREFIX}-0-evar", "optional": False}},
], ids=["other-configmap", "optional", "capabilities-configmap", "secret"])
def test_envfrom_of_anything_but_the_pods_own_evar_configmap_is_refused(source):
    pod, model = after_kai(share_pod())
    pod["spec"]["containers"][0]["envFrom"].append(source)
    assert rules_of(pod, model) == {"env-from"}


def test_kais_envfrom_in_another_container_is_refused():
    pod, model = after_kai(share_pod())
    pod["spec"]["containers"][1]["envFrom"] = copy.deepcopy(pod["spec"]["containers"][0]["envFrom"])
    assert rules_of(pod, model) == {"env-from"}


def test_the_annotation_may_not_change_after_creation_whoever_writes():
    old, model = after_kai(share_pod())
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] = f"{HOST_NAME}-ccccccc-shared-gpu"
    assert "kai-sharing" in rules_of(new, model, old=old)
    del new["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION]
    assert "kai-sharing" in rules_of(new, model, old=old)
    assert violations(copy.deepcopy(old), model, old=old) == []


def test_a_fraction_pods_sidecar_and_init_containers_see_no_gpu_while_the_share_container_is_kais():
    """KAI gives the share to containers[0]; the other containers would see every GPU of the node
    through their images' NVIDIA_VISIBLE_DEVICES=all if the guard left them alone."""
    pod = share_pod()
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    mutated, model = after_kai(pod)
    containers = mutated["spec"]["containers"]
    blind = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    assert blind in containers[1]["env"] and blind in mutated["spec"]["initContainers"][0]["env"]
    assert blind not in (containers[0].get("env") or [])
    assert violations(mutated, model) == []
