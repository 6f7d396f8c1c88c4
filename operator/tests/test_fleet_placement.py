"""fleet.placement: sticky placement, spec.placement, cordons, unreachable and stale members, the
member's own policy, free GPUs (pending grants included) and the choice among members that fit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gputenant.api.hub import GpuTenantSpec
from gputenant.config.fleet import FleetConfig
from gputenant.config.models import OperatorConfig
from gputenant.fleet.placement import Member, place, unreported_grant
from gputenant.fleet.placement import judge as judge_member
from gputenant.fleet.report import MemberReport, build_report
from gputenant.pools.report import PoolReport

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
MAX_AGE = 300.0
EXCLUSIVE = {"name": "h100", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559, "gpus": 8,
             "nodeSelector": {"gputenant.io/pool": "h100"}}
TIME_SLICING = {"name": "a100-ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 8,
                "nodeSelector": {"gputenant.io/pool": "a100-ts"}, "timeSlicing": {"replicas": 4}}


def report(pools: list[dict], granted: dict[str, float] | None = None, *, age: float = 0,
           tenants: dict[str, list[str]] | None = None, problems: dict[str, list[str]] | None = None,
           reported: list[str] | None = None) -> MemberReport:
    """A member's report for a configuration of `pools`; `reported`: the pools its report lists (all)."""
    config = OperatorConfig.model_validate({"pools": pools})
    listed = [p for p in config.pools if reported is None or p.name in reported]
    reports = [PoolReport(name=p.name, mode=p.mode.value, nodes=[], node_gpus=0, configured_gpus=p.gpus,
                          granted=(granted or {}).get(p.name, 0.0), burst=0.0, tenants=(tenants or {}).get(p.name, []),
                          problems=(problems or {}).get(p.name, [])) for p in listed]
    return build_report(config, reports, NOW - timedelta(seconds=age), "0.4.0")


def member(name: str, granted: float = 0.0, *, pools: list[dict] | None = None, **fields) -> Member:
    """A reachable member with one Exclusive pool of 8 GPUs, `granted` of them guaranteed already."""
    return Member(name, report=report(pools or [EXCLUSIVE], {"h100": granted}), **fields)


def spec(quota: float = 1, trust: str = "Trusted", **fields) -> GpuTenantSpec:
    return GpuTenantSpec.model_validate({"trust": trust, "owners": [{"kind": "User", "name": "alice"}],
                                         "gpu": {"quota": quota}, **fields})


def place_new(tenant: GpuTenantSpec, members: list[Member], pending: dict | None = None):
    return place("team-a", tenant, members, current=None, now=NOW, max_age_seconds=MAX_AGE, pending=pending)


def judge(tenant: GpuTenantSpec, one: Member, pending: dict | None = None):
    return judge_member("team-a", tenant, one, now=NOW, max_age_seconds=MAX_AGE, pending=pending or {})


# -- sticky --------------------------------------------------------------------------------------

@pytest.mark.parametrize("east", [
    member("east", granted=8),
    member("east", cordoned=True),
    Member("east", problem="no answer from https://east:6443 within 5s"),
    Member("east", report=report([EXCLUSIVE], age=MAX_AGE * 10)),
], ids=["full", "cordoned", "unreachable", "stale"])
def test_a_placed_tenant_stays_on_its_member_whatever_its_state(east):
    """Full, cordoned, unreachable or stale, and even when its spec.placement no longer admits it."""
    tenant = spec(4, placement={"clusters": ["west"]})
    placement = place("team-a", tenant, [member("west"), east], current="east", now=NOW, max_age_seconds=MAX_AGE)
    assert (placement.cluster, placement.reason) == ("east", "Placed")
    assert placement.message.startswith("placed on east; a placed tenant stays there")
    assert placement.verdicts == () and placement.pool is None


def test_a_tenant_whose_member_is_no_longer_registered_stays_placed_there():
    placement = place("team-a", spec(), [member("west")], current="east", now=NOW, max_age_seconds=MAX_AGE)
    assert (placement.cluster, placement.reason) == ("east", "MemberNotRegistered")
    assert "east, which is no longer a registered member" in placement.message
    assert "nothing is moved or deleted" in placement.message


# -- the choice among members that fit -----------------------------------------------------------

def test_a_new_tenant_goes_to_the_member_with_most_free_gpus_left():
    placement = place_new(spec(2), [member("east", granted=6), member("west", granted=2)])
    assert (placement.cluster, placement.reason, placement.pool) == ("west", "Placed", "h100")
    assert placement.message == "placed on west: pool h100 (Exclusive) has 6 of 8 GPUs free for gpu.quota 2"
    east, west = placement.verdicts
    assert (east.cluster, east.fits, east.free_after) == ("east", True, 0.0)
    assert (west.cluster, west.fits, west.free_after, west.reason) == ("west", True, 4.0, "FallbackToStrongerMode")


def test_members_with_as_many_free_gpus_left_are_told_apart_by_name():
    placement = place_new(spec(), [member("west", granted=1), member("east", granted=1), member("north", granted=1)])
    assert placement.cluster == "east"
    assert [verdict.cluster for verdict in placement.verdicts] == ["east", "north", "west"]


def test_a_tenant_with_quota_0_fits_a_full_member_and_takes_no_pool():
    placement = place_new(spec(0), [member("east", granted=8)])
    assert (placement.cluster, placement.reason, placement.pool) == ("east", "Placed", None)
    (verdict,) = placement.verdicts
    assert (verdict.fits, verdict.reason, verdict.message) == (True, "NoGpuRequested", "the tenant asks for no GPUs")


def test_a_tenant_with_quota_0_goes_where_most_gpus_are_free():
    placement = place_new(spec(0), [member("east", granted=6), member("west", granted=1)])
    assert placement.cluster == "west"
    assert {v.cluster: v.free_after for v in placement.verdicts} == {"east": 2.0, "west": 7.0}


# -- spec.placement ------------------------------------------------------------------------------

def test_spec_placement_clusters_admit_only_the_named_members():
    placement = place_new(spec(placement={"clusters": ["east"]}), [member("east", granted=6), member("west")])
    assert placement.cluster == "east"
    west = next(v for v in placement.verdicts if v.cluster == "west")
    assert (west.fits, west.reason, west.message) == (False, "NotSelected", "not in spec.placement.clusters (east)")


def test_cluster_selector_match_labels_must_all_hold():
    tenant = spec(placement={"clusterSelector": {"matchLabels": {"region": "eu", "tier": "gold"}}})
    placement = place_new(tenant, [member("east", labels={"region": "eu", "tier": "gold"}, granted=6),
                                   member("west", labels={"region": "eu"}),
                                   member("north", labels={"region": "us", "tier": "gold"})])
    assert placement.cluster == "east"
    refused = {v.cluster: (v.reason, v.message) for v in placement.verdicts if not v.fits}
    assert refused == {name: ("NotSelected", "its labels do not match spec.placement.clusterSelector "
                                             "(region=eu, tier=gold)") for name in ("north", "west")}


@pytest.mark.parametrize(("operator", "values", "labels", "admitted"), [
    ("In", ["eu", "uk"], {"region": "uk"}, True),
    ("In", ["eu"], {"region": "us"}, False),
    ("In", ["eu"], {}, False),
    ("NotIn", ["eu"], {"region": "us"}, True),
    ("NotIn", ["eu"], {"region": "eu"}, False),
    ("NotIn", ["eu"], {}, True),
    ("Exists", [], {"region": ""}, True),
    ("Exists", [], {"zone": "a"}, False),
    ("DoesNotExist", [], {"zone": "a"}, True),
    ("DoesNotExist", [], {"region": "eu"}, False),
])
def test_cluster_selector_match_expressions(operator, values, labels, admitted):
    requirement = {"key": "region", "operator": operator, "values": values}
    verdict = judge(spec(placement={"clusterSelector": {"matchExpressions": [requirement]}}),
                    member("east", labels=labels))
    assert verdict.fits is admitted
    if not admitted:
        shown = f"region {operator} ({','.join(values)})" if values else f"region {operator}"
        assert verdict.reason == "NotSelected"
        assert verdict.message == f"its labels do not match spec.placement.clusterSelector ({shown})"


@pytest.mark.parametrize("requirement", [{"key": "region", "operator": "In"},
                                         {"key": "region", "operator": "NotIn", "values": []},
                                         {"key": "region", "operator": "Exists", "values": ["eu"]},
                                         {"key": "region", "operator": "DoesNotExist", "values": ["eu"]}])
def test_selector_requirements_refuse_values_that_do_not_fit_their_operator(requirement):
    with pytest.raises(ValidationError, match="In and NotIn need values; Exists and DoesNotExist take none"):
        spec(placement={"clusterSelector": {"matchExpressions": [requirement]}})


# -- members that cannot take a new tenant -------------------------------------------------------

def test_a_cordoned_member_takes_no_new_tenant():
    verdict = judge(spec(), member("east", cordoned=True))
    assert (verdict.fits, verdict.reason) == (False, "Cordoned")
    assert "cordoned" in verdict.message


def test_an_unreachable_member_says_why():
    verdict = judge(spec(), Member("east", problem="https://east:6443 is unreachable: connection refused"))
    assert (verdict.fits, verdict.reason) == (False, "MemberUnreachable")
    assert verdict.message == "https://east:6443 is unreachable: connection refused"
    assert judge(spec(), Member("east")).message == "no capacity report read yet"


def test_a_report_older_than_the_max_age_is_not_trusted():
    stale = judge(spec(), Member("east", report=report([EXCLUSIVE], age=MAX_AGE + 1)))
    assert (stale.fits, stale.reason) == (False, "ReportStale")
    assert stale.message.startswith("its capacity report of 2026-01-02T02:59:04Z is more than 300s old")
    assert judge(spec(), Member("east", report=report([EXCLUSIVE], age=MAX_AGE))).fits


def test_a_report_from_further_ahead_than_the_max_age_is_not_trusted():
    ahead = judge(spec(), Member("east", report=report([EXCLUSIVE], age=-(MAX_AGE + 1))))
    assert (ahead.fits, ahead.reason) == (False, "ReportStale")
    assert "ahead of the hub's clock" in ahead.message


def test_the_members_own_policy_refuses_a_tenant_its_pools_cannot_isolate():
    time_slicing_only = member("east", pools=[TIME_SLICING])
    verdict = judge(spec(trust="Untrusted"), time_slicing_only)
    assert (verdict.fits, verdict.reason) == (False, "NoPoolForMode")
    assert verdict.message.startswith("no MIG or Exclusive pool in the operator config (pools: a100-ts")
    placement = place_new(spec(trust="Untrusted"), [time_slicing_only, member("west", granted=7)])
    assert (placement.cluster, placement.pool) == ("west", "h100")


def test_a_pool_the_report_does_not_list_or_that_has_problems_takes_no_tenant():
    unlisted = Member("east", report=report([EXCLUSIVE], reported=[]))
    verdict = judge(spec(), unlisted)
    assert (verdict.fits, verdict.reason) == (False, "PoolNotReported")
    assert "pool h100, which its report does not list" in verdict.message
    broken = Member("east", report=report([EXCLUSIVE], problems={"h100": ["UnexplainedReservation: 2 GPUs"]}))
    verdict = judge(spec(), broken)
    assert (verdict.fits, verdict.reason, verdict.message) == (
        False, "PoolHasProblems", "pool h100: UnexplainedReservation: 2 GPUs")


def test_a_quota_above_the_free_gpus_is_no_capacity():
    verdict = judge(spec(3), member("east", granted=6))
    assert (verdict.fits, verdict.reason, verdict.pool) == (False, "NoCapacity", None)
    assert verdict.message == "pool h100 (Exclusive) has 2 of 8 GPUs free; the tenant's gpu.quota is 3"
    assert judge(spec(2), member("east", granted=6)).fits


def test_pending_grants_count_against_the_free_gpus_of_their_member_and_pool_only():
    assert judge(spec(2), member("east", granted=5), {("east", "h100"): 1.5}).reason == "NoCapacity"
    assert judge(spec(2), member("east", granted=5), {("east", "other"): 8, ("west", "h100"): 8}).fits
    overbooked = judge(spec(1), member("east"), {("east", "h100"): 10})
    assert overbooked.message == "pool h100 (Exclusive) has 0 of 8 GPUs free; the tenant's gpu.quota is 1"
    placement = place_new(spec(1), [member("east", granted=3), member("west", granted=4)], {("east", "h100"): 2})
    assert placement.cluster == "west"


def test_no_member_fits_names_every_members_reason():
    placement = place_new(spec(3), [member("west", granted=7), member("east", cordoned=True),
                                    Member("north", problem="connection refused")])
    assert (placement.cluster, placement.reason, placement.pool) == (None, "NoMemberFits", None)
    assert placement.message == (
        "no member can take the tenant (east: Cordoned: cordoned by the platform team: no new tenant; "
        "north: MemberUnreachable: connection refused; "
        "west: NoCapacity: pool h100 (Exclusive) has 1 of 8 GPUs free; the tenant's gpu.quota is 3)")
    assert place_new(spec(), []).message == "no member can take the tenant (no member is registered)"


# -- grants the member does not count yet --------------------------------------------------------

def test_unreported_grant_is_the_pool_and_quota_until_the_member_counts_the_tenant():
    assert unreported_grant("team-a", spec(2), member("east")) == ("h100", 2.0)
    counted = Member("east", report=report([EXCLUSIVE], {"h100": 2}, tenants={"h100": ["team-a"]}))
    assert unreported_grant("team-a", spec(2), counted) is None
    assert unreported_grant("team-a", spec(2), Member("east", problem="down")) is None
    assert unreported_grant("team-a", spec(0), member("east")) is None
    assert unreported_grant("team-a", spec(trust="Untrusted"), member("east", pools=[TIME_SLICING])) is None


# -- fleet configuration -------------------------------------------------------------------------

@pytest.mark.parametrize(("max_age", "poll"), [(30, 15), (20, 15), (1, 1)])
def test_a_report_must_outlive_two_polls(max_age, poll):
    with pytest.raises(ValidationError) as raised:
        FleetConfig.model_validate({"reportMaxAgeSeconds": max_age, "pollSeconds": poll})
    message = str(raised.value)
    assert f"fleet.reportMaxAgeSeconds ({max_age:g})" in message and f"fleet.pollSeconds ({poll:g})" in message
    assert FleetConfig.model_validate({"reportMaxAgeSeconds": 2 * poll + 1, "pollSeconds": poll})


def test_a_new_tenant_never_goes_where_its_name_is_taken():
    member = Member("east", report=report([EXCLUSIVE]), tenant_names=frozenset({"team-a"}))
    verdict = judge(spec(), member)
    assert (verdict.fits, verdict.reason) == (False, "NameTaken")
    assert "already has a GpuTenant named team-a" in verdict.message
