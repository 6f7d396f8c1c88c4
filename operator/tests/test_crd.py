"""The generated GpuTenant CRD: checked-in copies current, structural, described, and the pydantic
half of the admission table (the API-server half is e2e/tests/test_admission_gputenant.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gputenant.api.crd import PRINTER_COLUMNS, build_crd, render_crd_yaml
from gputenant.api.examples import INVALID_CASES, VALID_CASES, InvalidCase
from gputenant.api.reference import render_reference_markdown
from gputenant.api.rules import CEL_KEY, duration_between, is_https_url, is_positive_quantity
from gputenant.api.v1alpha1 import GpuTenant, SharingMode, Trust
from gputenant.cli import main
from gputenant.quantities import parse_quantity
from gputenant.timefmt import parse_duration

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "tenant.yaml"
REFERENCE_FILE = REPO / "docs" / "reference" / "gputenant.md"


def schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node`` with its field path (list items as ``path[]``)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}{{}}")


def api_nodes() -> Iterator[tuple[str, dict[str, Any]]]:
    for part in ("spec", "status"):
        yield from nodes(schema()["properties"][part], part)


def test_checked_in_crd_is_generated_output():
    assert CRD_FILE.read_text() == render_crd_yaml(), "crds/tenant.yaml is stale: run `make generate`"


def test_checked_in_reference_is_generated_output():
    assert REFERENCE_FILE.read_text() == render_reference_markdown(), (
        "docs/reference/gputenant.md is stale: run `make generate`"
    )


def test_cli_prints_crd_and_reference(capsys):
    assert main(["crd"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == build_crd()
    assert main(["crd", "--markdown"]) == 0
    assert capsys.readouterr().out == render_reference_markdown()


def test_crd_identity():
    crd = build_crd()
    assert crd["metadata"]["name"] == "gputenants.gputenant.io"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "GpuTenant"
    assert "gput" in crd["spec"]["names"]["shortNames"]
    alpha, beta = crd["spec"]["versions"]
    assert alpha["name"] == "v1alpha1" and not alpha["storage"] and alpha["deprecated"]
    assert beta["name"] == "v1beta1" and beta["storage"] and "deprecated" not in beta
    assert alpha["subresources"] == beta["subresources"] == {"status": {}}
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"


def test_every_field_has_a_description():
    missing = [path for path, node in api_nodes() if not path.endswith(("[]", "{}")) and not node.get("description")]
    assert not missing, f"fields without description (add description= to the pydantic Field): {missing}"


def test_schema_is_structural():
    for path, node in api_nodes():
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title", "nullable", "$defs"} & set(node), path
        assert "type" in node, f"{path} has no type"
        if node["type"] == "object":
            assert "properties" in node or "additionalProperties" in node, f"{path}: object without fields"
        if "default" in node and node["type"] == "object" and node["default"]:
            assert set(node["default"]) <= set(node["properties"]), f"{path}: default has unknown fields"


def test_spec_strings_and_lists_are_bounded_for_cel_cost():
    """Unbounded strings and lists make the API server reject CEL rules as too expensive."""
    for path, node in nodes(schema()["properties"]["spec"], "spec"):
        if node["type"] == "string" and "enum" not in node:
            assert "maxLength" in node, f"{path} needs max_length"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path} needs max_length"


def test_every_rule_says_what_to_fix():
    rules = [rule for _, node in nodes(schema(), "") for rule in node.get(CEL_KEY, [])]
    assert len(rules) >= 15
    for rule in rules:
        assert rule["message"] and not rule["message"].endswith(".")


def test_conditions_are_a_map_keyed_by_type():
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) >= {"type", "status", "reason", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"


@pytest.mark.parametrize("column", PRINTER_COLUMNS, ids=lambda column: column["name"])
def test_printer_columns_point_at_schema_fields(column):
    path = re.sub(r"\[\?\(@\.type==\"Ready\"\)\]", "[]", column["jsonPath"]).lstrip(".")
    if path.startswith("metadata."):
        return
    node = schema()
    for part in path.replace("[]", ".[]").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    assert node["type"] in ("string", "number", "integer")


def location(error: dict[str, Any]) -> str:
    path = ""
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda case: case.id)
def test_pydantic_rejects_invalid_tenant_at_the_field(case: InvalidCase):
    with pytest.raises(ValidationError) as raised:
        GpuTenant.model_validate(case.tenant)
    errors = {location(error): error["msg"] for error in raised.value.errors()}
    assert case.pydantic_path in errors, f"expected an error at {case.pydantic_path}, got {errors}"
    if case.message:
        assert case.message in errors[case.pydantic_path]


def test_admission_table_covers_the_trust_matrix():
    """Every trust level with every sharing mode is a valid or an invalid case, so the CEL rule
    generated from api/trust.py meets the API server on the whole matrix, not on a sample."""

    def trust_and_mode(tenant: dict[str, Any]) -> tuple[str, str]:
        spec = tenant["spec"]
        return spec["trust"], spec.get("sharing", {}).get("mode", "Auto")

    covered = {trust_and_mode(case.tenant) for case in VALID_CASES}
    refused = {trust_and_mode(case.tenant) for case in INVALID_CASES if case.path == "spec.sharing.mode"}
    matrix = {(trust.value, mode.value) for trust in Trust for mode in SharingMode}
    assert matrix <= covered | refused
    assert refused & matrix == {("Internal", "TimeSlicing"), ("Untrusted", "TimeSlicing"), ("Untrusted", "HAMi")}


def test_admission_table_is_broad():
    assert len(INVALID_CASES) >= 30
    assert len({case.id for case in INVALID_CASES}) == len(INVALID_CASES)


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda case: case.id)
def test_pydantic_accepts_valid_tenant(case):
    GpuTenant.model_validate(case.tenant)


@pytest.mark.parametrize(
    ("text", "value"),
    [("16", Decimal(16)), ("500m", Decimal("0.5")), ("4Gi", Decimal(4 * 1024**3)), ("1.5k", Decimal(1500)),
     ("1e3", Decimal(1000)), ("-1Gi", Decimal(-(1024**3))), (".5", Decimal("0.5")), ("5.", Decimal(5)), ("100u", Decimal("0.0001"))],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "5GB", "1 Gi", "1K", "Gi", "1.2.3", "--1"])
def test_parse_quantity_rejects(text):
    assert parse_quantity(text) is None


def test_quantity_ordering_across_suffixes():
    assert parse_quantity("1Gi") > parse_quantity("1000Mi") > parse_quantity("1G") > parse_quantity("1M")


@pytest.mark.parametrize(("text", "minutes"), [("10m", 10), ("24h", 1440), ("1h30m", 90), ("600s", 10), ("8760h", 525600)])
def test_parse_duration(text, minutes):
    assert parse_duration(text).total_seconds() == minutes * 60


@pytest.mark.parametrize("text", ["", "1d", "1 h", "1.5h", "h", "-1h"])
def test_parse_duration_rejects(text):
    assert parse_duration(text) is None


@pytest.mark.parametrize(("quantity", "duration"), [(" 1", " 1h"), ("1 ", "1h "), ("1\n", "1h\n")])
def test_api_twins_refuse_surrounding_whitespace(quantity, duration):
    """The shared parsers forgive surrounding whitespace; CEL's quantity() and matches() do not."""
    assert is_positive_quantity(quantity.strip()) and not is_positive_quantity(quantity)
    assert duration_between(duration.strip(), "10m", "8760h") and not duration_between(duration, "10m", "8760h")


@pytest.mark.parametrize(("url", "ok"), [
    ("https://team.example.com", True), ("https://10.0.0.1:6443/", True), ("http://team.example.com", False),
    ("https://", False), ("team.example.com", False), ("https://[::1", False),
])
def test_https_url(url, ok):
    assert is_https_url(url) is ok
