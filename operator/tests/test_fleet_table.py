"""`gputenant fleet`'s tables (fleet.table): members with each pool's GPUs, granted and free, their
problems, then tenants with their cluster and Ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputenant.fleet.members import MemberView
from gputenant.fleet.placement import Member
from gputenant.fleet.report import MemberReport, PoolCapacity
from gputenant.fleet.table import fleet_tables

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def view(name: str, *pools: PoolCapacity, problem: str | None = None, cordoned: bool = False) -> MemberView:
    report = MemberReport(NOW - timedelta(seconds=30), "0.3.0", {}, pools) if pools else None
    return MemberView(Member(name, cordoned=cordoned, report=report, problem=problem),
                      {"a": {}} if report else None)


def hub_tenant(name: str, cluster: str | None, ready: str, reason: str) -> dict:
    return {"metadata": {"name": name}, "status": {
        "fleet": {"cluster": cluster, "reason": reason} if cluster else {"reason": reason},
        "conditions": [{"type": "Ready", "status": ready, "reason": reason}]}}


def test_members_pools_problems_and_tenants_in_one_listing():
    text = fleet_tables(
        [view("east", PoolCapacity("a100", "TimeSlicing", 2, 1.5, ("a",)), PoolCapacity("mig", "MIG", 1, 0, ())),
         view("west", problem="no answer from https://west:6443 within 5s"),
         view("north", PoolCapacity("h100", "Exclusive", 8, 8, ()), cordoned=True)],
        [hub_tenant("b", None, "False", "NoMemberFits"), hub_tenant("a", "east", "True", "TenantReady")], NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["MEMBER", "STATE", "REPORTED", "POOL", "MODE", "GPUS", "GRANTED", "FREE", "TENANTS"]
    assert lines[1].split() == ["east", "ready", "30s", "ago", "a100", "TimeSlicing", "2", "1.5", "0.5", "1"]
    assert lines[2].split() == ["mig", "MIG", "1", "0", "1"]
    assert lines[3].split() == ["west", "unreachable", "-", "-", "-", "-", "-", "-", "?"]
    assert lines[4].split()[:2] == ["north", "cordoned"] and lines[4].split()[-2] == "0"
    assert "west: no answer from https://west:6443 within 5s" in lines
    tenants = lines[lines.index("TENANT  CLUSTER  READY  REASON"):]
    assert [line.split() for line in tenants[1:]] == [["a", "east", "True", "TenantReady"],
                                                      ["b", "-", "False", "NoMemberFits"]]


def test_a_hub_without_members_says_so():
    assert fleet_tables([], [], NOW).startswith("no member cluster is registered")
