"""Conversion between v1alpha1 and v1beta1 (api.conversion): lossless both ways for every example,
a spelling one version cannot hold kept in an annotation and restored, and the ConversionReview
answer the API server expects. The API server's side: e2e/tests/test_api_versions_served.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from gputenant.api import hub, v1alpha1, v1beta1
from gputenant.api.conversion import PRESERVED_PREFIX, ConversionError, convert, review, share_memory
from gputenant.api.examples import VALID_CASES

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted({*(REPO_ROOT / "examples").glob("*/*.yaml"), *(REPO_ROOT / "examples").glob("*/*/*.yaml")})
MODELS = {"v1alpha1": v1alpha1.GpuTenant, "v1beta1": v1beta1.GpuTenant}


def example_tenants() -> list[dict]:
    """Every GpuTenant in the example files (examples/tenants, examples/argocd/tenants)."""
    return [doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text())
            if isinstance(doc, dict) and doc.get("kind") == "GpuTenant"]


def every_example() -> list[dict]:
    return [case.tenant for case in VALID_CASES] + example_tenants()


def hami_tenant(version: str, hami: dict, annotations: dict | None = None) -> dict:
    metadata: dict = {"name": "team-hami"} | ({"annotations": annotations} if annotations else {})
    return {"apiVersion": f"gputenant.io/{version}", "kind": "GpuTenant", "metadata": metadata,
            "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": "a"}],
                     "sharing": {"mode": "HAMi", "hami": hami}}}


@pytest.mark.parametrize("example", every_example(), ids=lambda example: example["metadata"]["name"])
@pytest.mark.parametrize("there", ["v1alpha1", "v1beta1"])
def test_every_example_goes_to_each_version_and_back_unchanged(example, there):
    converted = convert(example, there)
    MODELS[there].model_validate(converted)
    assert converted["apiVersion"] == f"gputenant.io/{there}"
    assert convert(converted, example["apiVersion"].split("/")[1]) == example
    assert hub.GpuTenant.from_body(converted) == hub.GpuTenant.from_body(example)


def test_the_examples_are_written_as_v1beta1():
    tenants = example_tenants()
    assert len(tenants) >= 5 and {tenant["apiVersion"] for tenant in tenants} == {"gputenant.io/v1beta1"}


def test_memory_mib_becomes_a_quantity_in_the_largest_exact_unit():
    assert [share_memory(mib) for mib in (128, 2560, 10240, 1048576)] == ["128Mi", "2560Mi", "10Gi", "1Ti"]
    beta = convert(hami_tenant("v1alpha1", {"memoryMiB": 10240, "corePercent": 30}), "v1beta1")
    assert beta["spec"]["sharing"]["hami"] == {"memory": "10Gi", "corePercent": 30}
    assert "annotations" not in beta["metadata"]


@pytest.mark.parametrize("written, mib", [("10240Mi", 10240), ("1024Gi", 1048576)])
def test_a_spelling_v1alpha1_cannot_hold_is_kept_and_restored(written, mib):
    beta = hami_tenant("v1beta1", {"memory": written})
    alpha = convert(beta, "v1alpha1")
    assert alpha["spec"]["sharing"]["hami"] == {"memoryMiB": mib}
    assert json.loads(alpha["metadata"]["annotations"][PRESERVED_PREFIX + "v1beta1"]) == {"spec.sharing.hami.memory": written}
    assert convert(alpha, "v1beta1") == beta


def test_a_field_changed_since_wins_over_the_kept_spelling():
    alpha = convert(hami_tenant("v1beta1", {"memory": "10240Mi"}), "v1alpha1")
    alpha["spec"]["sharing"]["hami"]["memoryMiB"] = 2048
    assert convert(alpha, "v1beta1") == hami_tenant("v1beta1", {"memory": "2Gi"})


def test_other_annotations_are_kept_and_a_stale_kept_spelling_is_dropped():
    alpha = hami_tenant("v1alpha1", {"memoryMiB": 2048},
                        {"team": "a", PRESERVED_PREFIX + "v1beta1": json.dumps({"spec.sharing.hami.memory": "bogus"})})
    beta = convert(alpha, "v1beta1")
    assert beta["metadata"]["annotations"] == {"team": "a"}
    assert beta["spec"]["sharing"]["hami"]["memory"] == "2Gi"


def test_convert_leaves_its_input_alone():
    beta = hami_tenant("v1beta1", {"memory": "10240Mi"})
    before = copy.deepcopy(beta)
    convert(beta, "v1alpha1")
    assert beta == before


@pytest.mark.parametrize("obj, version, words", [
    (hami_tenant("v1beta1", {"memory": "10.5Mi"}), "v1alpha1", "spec.sharing.hami.memory"),
    (hami_tenant("v1alpha1", {"memoryMiB": "many"}), "v1beta1", "spec.sharing.hami.memoryMiB"),
    ({"apiVersion": "gputenant.io/v2", "kind": "GpuTenant"}, "v1beta1", "gputenant.io/v2"),
    ({"apiVersion": "v1", "kind": "ConfigMap"}, "v1beta1", "ConfigMap"),
    (hami_tenant("v1beta1", {}), "v9", "v9"),
])
def test_what_cannot_be_converted_is_refused_naming_it(obj, version, words):
    with pytest.raises(ConversionError, match=words):
        convert(obj, version)


def test_a_review_converts_every_object_and_echoes_the_uid():
    objects = [hami_tenant("v1beta1", {"memory": "10Gi"}), hami_tenant("v1alpha1", {"memoryMiB": 1024})]
    answer = review({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                     "request": {"uid": "u-1", "desiredAPIVersion": "gputenant.io/v1alpha1", "objects": objects}})
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1" and answer["kind"] == "ConversionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["result"] == {"status": "Success"}
    assert [o["spec"]["sharing"]["hami"] for o in response["convertedObjects"]] == [{"memoryMiB": 10240},
                                                                                  {"memoryMiB": 1024}]


@pytest.mark.parametrize("desired", ["gputenant.io/v9", "other.io/v1beta1"])
def test_a_review_that_cannot_be_answered_fails_with_the_reason(desired):
    answer = review({"request": {"uid": "u-2", "desiredAPIVersion": desired,
                                 "objects": [hami_tenant("v1beta1", {"memory": "10Gi"})]}})
    response = answer["response"]
    assert response["uid"] == "u-2" and response["result"]["status"] == "Failure"
    assert desired.split("/")[0] in response["result"]["message"] or "v9" in response["result"]["message"]
    assert response["convertedObjects"] == []


@pytest.mark.parametrize("memory, valid", [
    ("128Mi", True), ("10Gi", True), ("1Ti", True), ("1024Gi", True), ("127Mi", False), ("1025Gi", False),
    ("10.5Mi", False), ("0.5Ti", False), ("1000M", False), ("10737418240", False), ("-1Gi", False), ("010Gi", False),
])
def test_v1beta1_share_memory_is_a_whole_number_of_mi_gi_or_ti_in_range(memory, valid):
    assert v1beta1.is_share_memory(memory) is valid
