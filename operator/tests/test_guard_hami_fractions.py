"""HAMi mode's pod rules (KAI GPU fractions, docs/units.md): a GPU pod of an Internal tenant is one
`gpu-fraction` of whole shares, below one GPU and within the tenant's limit; nothing else asks for a GPU.
Decisions come from `decide` on examples/config.yaml, as the guard gets them."""

from __future__ import annotations

from pathlib import Path

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.choose import decide

EXAMPLE = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")


def tenant(limit: float = 2, core_percent: int = 25) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": "shares"}, "spec": {
        "trust": "Internal", "owners": [{"kind": "User", "name": "dana"}],
        "gpu": {"quota": limit}, "sharing": {"mode": "HAMi", "hami": {"corePercent": core_percent}}}})


def share_pod(annotations: dict | None = None, limits: dict | None = None) -> dict:
    container = {"name": "infer", "image": "busybox"}
    if limits:
        container["resources"] = {"limits": limits}
    return {"metadata": {"name": "p", "namespace": "tenant-shares", "annotations": annotations or {}},
            "spec": {"containers": [container]}}


def violations(pod: dict, model: GpuTenant | None = None) -> list[tuple[str, str]]:
    model = model or tenant()
    decision = decide("shares", model.spec, EXAMPLE)
    assert decision.possible, decision.message
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    return [(v.rule, v.message) for v in validate_pod(mutated, "shares", model.spec.trust, decision)]


@pytest.mark.parametrize("fraction", ["0.25", "0.5", "0.75", ".5", "0.250"])
def test_whole_shares_below_one_gpu_are_admitted_and_placed_on_the_pool(fraction):
    pod = share_pod({"gpu-fraction": fraction})
    assert violations(pod) == []
    decision = decide("shares", tenant().spec, EXAMPLE)
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    assert mutated["spec"]["schedulerName"] == "kai-scheduler"
    assert mutated["spec"]["nodeSelector"]["gputenant.io/pool"] == "l4-hami"
    assert mutated["metadata"]["labels"]["kai.scheduler/queue"] == "shares"


@pytest.mark.parametrize("fraction", ["0.3", "1", "1.25", "0", "-0.25", "abc", "NaN", "Infinity", "1/4"])
def test_other_fractions_are_refused_naming_the_share(fraction):
    [(rule, message)] = violations(share_pod({"gpu-fraction": fraction}))
    assert rule == "fraction-annotation"
    assert "set gpu-fraction to a multiple of 0.25 up to 0.75" in message


def test_a_fraction_above_the_tenants_limit_is_refused():
    [(rule, message)] = violations(share_pod({"gpu-fraction": "0.5"}), tenant(limit=0.25))
    assert rule == "fraction-annotation" and "up to 0.25" in message


def test_gpu_memory_is_refused_even_beside_a_fraction():
    found = violations(share_pod({"gpu-fraction": "0.25", "gpu-memory": "4000"}))
    assert found == [("fraction-annotation", 'annotation gpu-memory is not granted; ask for a share with annotation '
                                             'gpu-fraction: "0.25" (its memory is that portion of the GPU)')]


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                                      "nvidia.com/gpumem-percentage"])
def test_device_plugin_and_hami_resources_are_refused(resource):
    found = violations(share_pod(limits={resource: "1"}))
    assert ("gpu-resource", f"{resource} belongs to another sharing mechanism than HAMi; request no GPU resource but "
                            'annotation gpu-fraction: "0.25" (KAI GPU fractions)') in found


def test_a_share_with_isolation_switched_off_is_refused():
    pod = share_pod({"gpu-fraction": "0.25"})
    pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    assert [rule for rule, _ in violations(pod)] == ["isolation-env"]


@pytest.mark.parametrize("changed", ["0.75", "0.9", None])
def test_update_that_changes_the_fraction_is_refused(changed):
    """KAI placed and charged the pod for its share at creation: even a share the tenant could have
    asked for at first (0.75) may not replace it later, nor may it be dropped."""
    model = tenant()
    decision = decide("shares", model.spec, EXAMPLE)
    created = share_pod({"gpu-fraction": "0.25"})
    old = jsonpatch.apply_patch(created, mutate_pod(created, "shares", decision))
    kept = {key: value for key, value in old["metadata"]["annotations"].items() if key != "gpu-fraction"}
    annotations = {**kept, "gpu-fraction": changed} if changed else kept
    new = {**old, "metadata": {**old["metadata"], "annotations": annotations}}
    found = validate_pod(new, "shares", model.spec.trust, decision, operation="UPDATE", old=old)
    # the guard's HAMi-core caps no longer match the share (hami-caps); without its fraction the pod is a CPU
    # pod still placed on the GPU pool (node-selector too) that keeps the guard's KAI ConfigMap prefix and
    # HAMi-core's variables and mounts, which only a capped fraction pod may carry
    uncapped = ["kai-sharing", "isolation-env", "hami-preload"] if not changed else []
    assert {v.rule for v in found} - {"node-selector"} == {"fraction-annotation", "hami-caps", *uncapped}
    assert any("changed on a created pod" in v.message for v in found)
