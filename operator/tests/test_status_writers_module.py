"""Every write of a GpuTenant's status goes through `tenant_status.writers`: no other module of the
package sends one, and each writer sends only what it owns."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import gputenant
from gputenant.api import conditions as reasons
from gputenant.api.status import ATTESTATION, DELETION, PIPELINE, Condition
from gputenant.tenant_status.writers import write_conditions

PACKAGE = Path(gputenant.__file__).parent
WRITERS = PACKAGE / "tenant_status" / "writers.py"


def test_no_module_but_the_writers_module_writes_a_tenants_status():
    """A status write of another kind names its kind (the fleet hub's GpuTenantPlacement)."""
    writing = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
               if path != WRITERS and re.search(r"\.apply_status\((?!API_VERSION, PLACEMENT_KIND)", path.read_text())]
    assert writing == []


class Recorder:
    """Stands in for the API client (a test double): records what would be applied."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict, str]] = []

    async def apply_status(self, api_version: str, kind: str, name: str, status: dict, writer: str) -> dict:
        self.applied.append((name, status, writer))
        return {}


def condition(condition_type: str) -> Condition:
    return Condition(type=condition_type, status="True", reason="Because", last_transition_time="2026-11-28T00:00:00Z")


def test_a_conditions_writer_sends_only_the_conditions_it_owns():
    client = Recorder()
    everything = [condition(reasons.READY), condition(reasons.ISOLATION_VERIFIED), condition(reasons.DELETION_PREVENTED)]
    asyncio.run(write_conditions(client, "team-a", everything, ATTESTATION))  # type: ignore[arg-type]
    asyncio.run(write_conditions(client, "team-a", everything, DELETION))  # type: ignore[arg-type]
    sent = [(writer, [c["type"] for c in status["conditions"]]) for _, status, writer in client.applied]
    assert sent == [(ATTESTATION, [reasons.ISOLATION_VERIFIED]), (DELETION, [reasons.DELETION_PREVENTED])]


def test_the_pipelines_status_is_not_written_as_conditions_only():
    with pytest.raises(ValueError, match="own writer"):
        asyncio.run(write_conditions(Recorder(), "team-a", [], PIPELINE))  # type: ignore[arg-type]
