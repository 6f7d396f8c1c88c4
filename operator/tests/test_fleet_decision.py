"""fleet.decision: the GpuTenantPlacement in OCM's PlacementDecision shape, as Argo CD's
ApplicationSet clusterDecisionResource generator reads it, and its CRD."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputenant.api.group import GROUP, KIND
from gputenant.cli import main
from gputenant.fleet.decision import (
    ANCHOR,
    API_VERSION,
    DECISIONS_LABEL,
    TENANT_LABEL,
    PlacementStatus,
    anchor_object,
    build_placement_crd,
    decided_cluster,
    generator_config_map,
    placement_object,
    placement_status,
    render_placement_crd_yaml,
)
from gputenant.fleet.placement import Placement, Verdict

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "placement.yaml"
VERDICTS = (Verdict("east", True, "ChosenFromTrust", "pool h100 (Exclusive) has 8 of 8 GPUs free for gpu.quota 1",
                    free_after=7.0, pool="h100"),
            Verdict("west", False, "Cordoned", "cordoned by the platform team: no new tenant"))
PLACED = Placement("east", "Placed", "placed on east: pool h100", VERDICTS)
UNPLACED = Placement(None, "NoMemberFits", "no member can take the tenant (no member is registered)")
TENANT = {"apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "metadata": {"name": "team-a", "uid": "1234-abcd"},
          "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}]}}


def schema() -> dict[str, Any]:
    return build_placement_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")


def keys_outside_schema(value: Any, node: dict[str, Any], path: str = "") -> list[str]:
    """Paths of `value` the API server would prune under `node` (a structural schema)."""
    if isinstance(value, dict) and "properties" in node:
        return [found for key, child in value.items()
                for found in ([f"{path}.{key}"] if key not in node["properties"]
                              else keys_outside_schema(child, node["properties"][key], f"{path}.{key}"))]
    if isinstance(value, list) and "items" in node:
        return [found for index, item in enumerate(value)
                for found in keys_outside_schema(item, node["items"], f"{path}[{index}]")]
    return []


# -- status --------------------------------------------------------------------------------------

def test_a_placed_tenants_status_has_one_decision_naming_cluster_reason_and_tenant():
    status = placement_status("team-a", PLACED)
    assert status["decisions"] == [{"clusterName": "east", "reason": "Placed", "tenant": "team-a"}]
    assert (status["reason"], status["message"]) == ("Placed", "placed on east: pool h100")
    assert status["clusters"] == [
        {"clusterName": "east", "fits": True, "reason": "ChosenFromTrust",
         "message": "pool h100 (Exclusive) has 8 of 8 GPUs free for gpu.quota 1"},
        {"clusterName": "west", "fits": False, "reason": "Cordoned",
         "message": "cordoned by the platform team: no new tenant"}]


def test_an_unplaced_tenants_status_has_an_empty_list_of_decisions():
    status = placement_status("team-a", UNPLACED)
    assert status == {"decisions": [], "clusters": [], "reason": "NoMemberFits",
                      "message": "no member can take the tenant (no member is registered)"}


def test_a_tenant_kept_on_a_deregistered_member_still_names_it():
    """Argo CD keeps the Application while the decision names the member: nothing is deleted."""
    status = placement_status("team-a", Placement("gone", "MemberNotRegistered", "placed on gone, ..."))
    assert status["decisions"] == [{"clusterName": "gone", "reason": "MemberNotRegistered", "tenant": "team-a"}]


@pytest.mark.parametrize("placement", [PLACED, UNPLACED], ids=["placed", "unplaced"])
def test_the_status_fits_the_model_and_the_crd_prunes_none_of_it(placement):
    status = placement_status("team-a", placement)
    assert PlacementStatus.model_validate(status).model_dump(by_alias=True) == status
    assert keys_outside_schema(status, schema()["properties"]["status"], "status") == []


def test_decided_cluster_reads_the_first_decision():
    assert decided_cluster({"status": placement_status("team-a", PLACED)}) == "east"
    assert decided_cluster({"status": placement_status("team-a", UNPLACED)}) is None
    for empty in (None, {}, {"status": None}, {"status": {}}, {"status": {"decisions": None}}):
        assert decided_cluster(empty) is None


# -- objects -------------------------------------------------------------------------------------

def test_a_placement_is_owned_by_its_tenant_and_labelled_for_the_generator():
    placement = placement_object(TENANT, "argocd")
    assert (placement["apiVersion"], placement["kind"]) == (API_VERSION, "GpuTenantPlacement")
    assert placement["metadata"]["name"] == "team-a" and placement["metadata"]["namespace"] == "argocd"
    assert placement["metadata"]["labels"] == {DECISIONS_LABEL: "true", TENANT_LABEL: "team-a"}
    assert placement["metadata"]["ownerReferences"] == [
        {"apiVersion": "gputenant.io/v1beta1", "kind": KIND, "name": "team-a", "uid": "1234-abcd",
         "blockOwnerDeletion": False}]
    assert placement["spec"] == {"tenant": "team-a"}
    assert "status" not in placement


def test_the_anchor_matches_the_generator_selector_but_is_no_tenants():
    anchor = anchor_object("argocd")
    assert anchor["metadata"] == {"name": ANCHOR, "namespace": "argocd", "labels": {DECISIONS_LABEL: "true"}}
    assert TENANT_LABEL not in anchor["metadata"]["labels"] and "ownerReferences" not in anchor["metadata"]
    assert anchor["spec"] == {"tenant": ""}
    assert (anchor["apiVersion"], anchor["kind"]) == (API_VERSION, "GpuTenantPlacement")


def test_both_specs_fit_the_crd():
    spec_schema = schema()["properties"]["spec"]
    for obj in (placement_object(TENANT, "argocd"), anchor_object("argocd")):
        assert set(spec_schema["required"]) <= set(obj["spec"])
        assert keys_outside_schema(obj["spec"], spec_schema) == []


def test_generator_config_map_has_exactly_the_keys_argocd_reads():
    config_map = generator_config_map("argocd", "gputenant-placements")
    assert config_map["metadata"] == {"name": "gputenant-placements", "namespace": "argocd"}
    data = config_map["data"]
    assert set(data) == {"apiVersion", "kind", "statusListKey", "matchKey"}
    group, _, version = data["apiVersion"].partition("/")
    crd = build_placement_crd()["spec"]
    assert (group, version) == (GROUP, crd["versions"][0]["name"]) and "." in group
    assert data["kind"] == crd["names"]["plural"] == "gputenantplacements"
    assert (data["statusListKey"], data["matchKey"]) == ("decisions", "clusterName")
    decision = placement_status("team-a", PLACED)[data["statusListKey"]][0]
    assert decision[data["matchKey"]] == "east"


# -- the CRD -------------------------------------------------------------------------------------

def test_checked_in_placement_crd_is_generated_output():
    assert CRD_FILE.read_text() == render_placement_crd_yaml(), "crds/placement.yaml is stale: run `make generate`"


def test_cli_prints_the_placement_crd(capsys):
    assert main(["crd", "--placement"]) == 0
    assert capsys.readouterr().out == render_placement_crd_yaml()


def test_placement_crd_identity():
    crd = build_placement_crd()
    assert crd["metadata"]["name"] == f"gputenantplacements.{GROUP}"
    assert crd["spec"]["scope"] == "Namespaced" and crd["spec"]["group"] == GROUP
    (version,) = crd["spec"]["versions"]
    assert version["served"] and version["storage"] and version["subresources"] == {"status": {}}
    assert yaml.safe_load(render_placement_crd_yaml()) == crd


def test_placement_crd_is_structural():
    for path, node in nodes(schema()):
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title", "nullable", "$defs"} & set(node), path
        assert "type" in node, f"{path} has no type"
        if node["type"] == "object" and path not in (".metadata",):
            assert "properties" in node or "additionalProperties" in node, f"{path}: object without fields"


def test_status_decisions_default_to_an_empty_list():
    """The generator reads status.decisions of any object whose status is set, without checking it is there."""
    status = schema()["properties"]["status"]
    decisions = status["properties"]["decisions"]
    assert (decisions["type"], decisions["default"], decisions["maxItems"]) == ("array", [], 1)
    assert set(decisions["items"]["required"]) == {"clusterName", "reason", "tenant"}
    assert all(status["properties"][key]["default"] == [] for key in ("decisions", "clusters"))


@pytest.mark.parametrize("column", build_placement_crd()["spec"]["versions"][0]["additionalPrinterColumns"],
                         ids=lambda column: column["name"])
def test_printer_columns_point_at_schema_fields(column):
    path = column["jsonPath"].replace("[0]", ".[]").lstrip(".")
    if path.startswith("metadata."):
        return
    node = schema()
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    assert node["type"] == column["type"] == "string"

