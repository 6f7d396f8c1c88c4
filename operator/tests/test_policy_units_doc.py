"""docs/units.md's worked examples are the policy's output: each table row is run through decide()."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gputenant.api import conditions as reasons
from gputenant.api.v1alpha1 import GpuTenantSpec
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide

ROOT = Path(__file__).resolve().parents[2]
UNITS_DOC = ROOT / "docs" / "units.md"
CONFIG = OperatorConfig.load(ROOT / "examples" / "config.yaml")
HEADER = "| Trust | Mode | quota | limit | Parameters | Pool | ResourceQuota `hard` | KAI quota | KAI limit |"
SHARING_PARAMETER = {
    "replicas": ("timeSlicing", "replicas"),
    "corePercent": ("hami", "corePercent"),
    "memoryMiB": ("hami", "memoryMiB"),
    "profile": ("mig", "profile"),
}


def worked_examples() -> list[list[str]]:
    lines = UNITS_DOC.read_text().splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def number(text: str) -> float:
    return float(text)


def tenant_from_row(trust: str, mode: str, quota: str, limit: str, parameters: str) -> GpuTenantSpec:
    sharing: dict = {"mode": mode}
    for key, value in re.findall(r"`(\w+)=([^`]+)`", parameters):
        block, field = SHARING_PARAMETER[key]
        sharing.setdefault(block, {})[field] = int(value) if value.isdigit() else value
    return GpuTenantSpec.model_validate(
        {
            "trust": trust,
            "owners": [{"kind": "Group", "name": "team"}],
            "gpu": {"quota": number(quota), "limit": number(limit)},
            "sharing": sharing,
        }
    )


def test_the_doc_has_worked_examples_for_every_trust_and_mechanism():
    rows = worked_examples()
    assert {row[0] for row in rows} == {"Trusted", "Internal", "Untrusted"}
    assert {row[1] for row in rows} == {"Auto", "TimeSlicing", "HAMi", "MIG", "Exclusive"}


@pytest.mark.parametrize("row", worked_examples(), ids=lambda row: "-".join(row[:4]))
def test_worked_example_matches_decide(row):
    trust, mode, quota, limit, parameters, pool, hard, kai_quota, kai_limit = row
    decision = decide("team", tenant_from_row(trust, mode, quota, limit, parameters), CONFIG)

    assert decision.possible, decision.message
    assert decision.pool.name == pool.strip("`")
    assert decision.quota == dict(re.findall(r"`([^`:]+): ([^`]+)`", hard))
    assert (decision.queue.quota, decision.queue.limit) == (number(kai_quota), number(kai_limit))


def test_trust_levels_doc_lists_every_refusal_reason():
    """docs/trust-levels.md's reason table names exactly the reasons decide() can refuse with."""
    package = ROOT / "operator" / "gputenant"
    modules = [package / "policy" / "choose.py", *sorted((package / "sharing").glob("*.py"))]
    source = "".join(module.read_text() for module in modules)
    in_code = {getattr(reasons, constant) for constant in re.findall(r"Refused\(\s*reasons\.(\w+)", source)}
    assert len(in_code) > 5
    doc = (ROOT / "docs" / "trust-levels.md").read_text()
    table = doc[doc.index("| Reason | Meaning | Fix |"):]
    in_doc = {name for line in table.splitlines()[2:] if line.startswith("|") for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert in_doc == in_code
