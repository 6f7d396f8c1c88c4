"""KAI's own admission (v0.12.0) against the guard: a fraction pod as it leaves KAI's mutating webhook is
admitted, and every piece of that shape a tenant could set or bend to see more of a GPU is refused
(docs/threat-model.md, "KAI's GPU-sharing ConfigMaps"). Decisions come from `decide` on examples/config.yaml;
the pod is mutated by the guard, then by KAI (`kai_sharing.with_kai_shape`, which keeps the prefix the
guard wrote, as KAI does), then validated, as the apiserver orders them."""

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
KAI_OWN_PREFIX = f"{HOST_NAME}-b2x9kzq-shared-gpu"
"""What KAI's webhook would write on a pod that reached it without a prefix."""
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


def after_kai(pod: dict, spec: dict = INTERNAL) -> tuple[dict, GpuTenant]:
    """The pod after the guard's mutation and then KAI's."""
    model = tenant(spec)
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision_of(model)))
    return kai_sharing.with_kai_shape(mutated, KAI_OWN_PREFIX), model


def decision_of(model: GpuTenant):
    decision = decide("shares", model.spec, EXAMPLE)
    assert decision.possible, decision.message
    return decision


PREFIX = kai_sharing.guard_prefix(share_pod())


def shaped_for(prefix: str, pod: dict, spec: dict = INTERNAL) -> tuple[dict, GpuTenant]:
    """What validation would see of a pod with KAI's shape for a prefix other than the guard's, after
    the guard's other mutations."""
    model = tenant(spec)
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision_of(model)))
    del mutated["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION]
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


def test_the_guard_writes_a_prefix_of_the_pods_name_and_a_digest_that_fits_kais_volume_name():
    assert PREFIX.startswith(f"{HOST_NAME[:kai_sharing.MAX_GUARD_BASE_LENGTH]}-") and PREFIX.endswith("-shared-gpu")
    long_name = "a-very-long-inference-server-name-" + "x" * 200
    for pod in (share_pod(), share_pod(long_name)):
        prefix = kai_sharing.guard_prefix(pod)
        assert len(prefix) <= kai_sharing.MAX_GUARD_PREFIX_LENGTH
        assert len(f"{kai_sharing.capabilities_configmap(prefix)}-vol") <= 63
        digest = prefix.removesuffix("-shared-gpu").rsplit("-", 1)[1]
        assert len(digest) == kai_sharing.DIGEST_LENGTH and set(digest) <= set(kai_sharing.RANDOM_ALPHABET)
    owned = share_pod(ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "job-a", "uid": "1"}])
    assert kai_sharing.guard_prefix(owned).startswith("job-a-")
    pod, model = after_kai(share_pod(long_name))
    assert violations(pod, model) == []


def test_each_pod_gets_its_own_prefix_even_with_the_first_characters_in_common():
    """The residual risk this closes: two pods of one tenant whose names share their first characters
    (KAI cuts the base to 33) and one pre-set prefix would make KAI's binder write both GPUs into one
    ConfigMap."""
    names = [f"{'s' * 40}-{n}" for n in range(2)]
    prefixes = {kai_sharing.guard_prefix(share_pod(name)) for name in names}
    assert len(prefixes) == 2
    other_namespace = share_pod()
    other_namespace["metadata"]["namespace"] = "tenant-other"
    assert kai_sharing.guard_prefix(other_namespace) != PREFIX
    assert kai_sharing.guard_prefix(share_pod()) == PREFIX


@pytest.mark.parametrize("prefix", [
    "other-pod-x-default-x-shares-b2x9kzq-shared-gpu",  # another pod's ConfigMaps: its GPU, not ours
    "evil-x-default-x-shares",  # a ConfigMap the tenant syncs in through vCluster
    KAI_OWN_PREFIX,  # KAI's form: a second pod of the tenant could carry the same
    "",
], ids=["other-pod", "synced-configmap", "kai-form", "empty"])
def test_a_prefix_the_tenant_sets_is_replaced_by_the_guards(prefix):
    pod = share_pod()
    pod["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] = prefix
    shaped, model = after_kai(pod)
    assert shaped["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] == PREFIX
    assert violations(shaped, model) == []


def test_kais_shape_the_tenant_hangs_on_its_own_prefix_is_refused():
    """The tenant shapes its pod as KAI would for a prefix it chose; the guard replaces the annotation and
    KAI adds its references for the guard's prefix, so the tenant's envFrom names a foreign ConfigMap."""
    pod = kai_sharing.with_kai_shape(share_pod(), "evil-x-default-x-shares")
    shaped, model = after_kai(pod)
    assert shaped["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] == PREFIX
    assert rules_of(shaped, model) == {"env-from"}


def test_if_kais_webhook_ran_before_the_guards_its_references_are_refused():
    """Fail closed: KAI would write its own prefix and references, the guard then replaces the prefix."""
    model = tenant(INTERNAL)
    pod = kai_sharing.with_kai_shape(share_pod(), KAI_OWN_PREFIX)
    pod = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision_of(model)))
    assert pod["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] == PREFIX
    assert rules_of(pod, model) == {"device-env", "env-from", "isolation-env"}


@pytest.mark.parametrize("prefix", [KAI_OWN_PREFIX, "evil-x-default-x-shares", f"{PREFIX}-0-evar", ""],
                         ids=["kai-form", "synced-configmap", "suffixed", "empty"])
def test_a_prefix_other_than_the_guards_is_refused_with_everything_hung_on_it(prefix):
    pod, model = shaped_for(prefix, share_pod())
    found = violations(pod, model)
    assert {rule for rule, _ in found} == {"kai-sharing", "device-env", "env-from", "isolation-env"}
    [message] = [m for rule, m in found if rule == "kai-sharing"]
    assert f"is not the prefix the guard's mutation gives this pod ({PREFIX!r})" in message
    assert "tenants may not" in message


def test_reinvoking_the_guard_after_kai_changes_nothing():
    pod, model = after_kai(share_pod())
    assert mutate_pod(pod, "shares", decision_of(model)) == []


def test_a_fraction_pod_without_a_name_is_refused():
    pod = share_pod()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "infer-"
    model = tenant(INTERNAL)
    assert kai_sharing.guard_prefix(pod) is None
    assert not [op for op in mutate_pod(pod, "shares", decision_of(model)) if "shared-gpu" in str(op)]
    assert ("kai-sharing", "a pod asking for a GPU fraction needs metadata.name: the guard's mutation derives its "
                           "KAI ConfigMap prefix from it (set metadata.name)") in violations(pod, model)


def test_a_generated_name_gets_kais_prefix_which_is_refused():
    """The apiserver names a generateName pod after mutation: KAI's webhook writes its own prefix."""
    pod = share_pod()
    pod["metadata"]["generateName"] = "infer-"
    found = violations(kai_sharing.with_kai_shape(pod, KAI_OWN_PREFIX), tenant(INTERNAL))
    [message] = [m for rule, m in found if rule == "kai-sharing"]
    assert "generateName is resolved after mutation: set metadata.name" in message


def test_a_trusted_tenant_is_refused_the_device_variable_and_envfrom_of_a_foreign_prefix():
    pod, model = shaped_for("evil-x-default-x-shares", share_pod(fraction="0.5"), TRUSTED)
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
    new["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] = KAI_OWN_PREFIX
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
