"""fleet.report: a member's capacity report, written as ConfigMap data and read back by the hub,
refused (ReportUnreadable) whenever it cannot be trusted to place a tenant."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gputenant.config.models import OperatorConfig
from gputenant.fleet.report import (
    POLICY_FIELDS,
    REPORT_KEY,
    MemberReport,
    PoolCapacity,
    ReportUnreadable,
    build_report,
    parse_report,
    report_data,
    same_capacity,
)
from gputenant.pools.report import PoolReport

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = OperatorConfig.load(ROOT / "examples" / "config.yaml")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def pool_reports(config: OperatorConfig) -> list[PoolReport]:
    return [PoolReport(name=p.name, mode=p.mode.value, nodes=["n1"], node_gpus=2, configured_gpus=p.gpus,
                       granted=1.5 * index, burst=3.0, tenants=["zeta", "alpha"],
                       problems=["UnexplainedReservation: 1 GPU"] if index == 1 else [])
            for index, p in enumerate(config.pools)]


def example_report(**changes) -> MemberReport:
    return replace(build_report(EXAMPLE, pool_reports(EXAMPLE), NOW, "0.4.0"), **changes)


def document(**changes) -> dict[str, str]:
    """A valid report's ConfigMap data with top-level keys of its JSON changed (None: removed)."""
    parsed = json.loads(report_data(example_report())[REPORT_KEY])
    for key, value in changes.items():
        if value is None:
            del parsed[key]
        else:
            parsed[key] = value
    return {REPORT_KEY: json.dumps(parsed)}


def test_a_report_reads_back_as_written():
    report = example_report()
    assert parse_report(report_data(report)) == report
    assert parse_report(report_data(report)).config.pools == EXAMPLE.pools


def test_a_report_carries_the_policy_fields_only_and_the_pools_as_the_member_sees_them():
    report = example_report()
    assert set(report.policy) == set(POLICY_FIELDS)
    assert report.config.trust_modes == EXAMPLE.trust_modes
    assert report.config.parent_queue_names == EXAMPLE.parent_queue_names
    assert [p.name for p in report.pools] == [p.name for p in EXAMPLE.pools]
    exclusive = report.pool("h100-exclusive")
    assert exclusive is not None and exclusive.gpus == 16 and exclusive.tenants == ("alpha", "zeta")
    assert report.pool("l4-hami").problems == ("UnexplainedReservation: 1 GPU",)
    assert report.pool("nowhere") is None
    assert report.tenants == frozenset({"alpha", "zeta"})


def test_a_pool_without_configured_gpus_reports_its_nodes_gpus():
    config = OperatorConfig.model_validate({"pools": [
        {"name": "h100", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559,
         "nodeSelector": {"p": "h100"}}]})
    reports = [PoolReport(name="h100", mode="Exclusive", nodes=["a", "b"], node_gpus=16, configured_gpus=None,
                          granted=0.0, burst=0.0)]
    assert build_report(config, reports, NOW, "0.4.0").pools[0].gpus == 16


def test_report_data_is_one_key_of_compact_sorted_json_with_second_precision_time():
    data = report_data(example_report(reported_at=datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC)))
    assert set(data) == {REPORT_KEY}
    text = data[REPORT_KEY]
    parsed = json.loads(text)
    assert text == json.dumps(parsed, sort_keys=True, separators=(",", ":"))
    assert (parsed["format"], parsed["reportedAt"], parsed["version"]) == (1, "2026-01-02T03:04:05Z", "0.4.0")
    assert parse_report(data).reported_at == NOW


@pytest.mark.parametrize(("data", "says"), [
    (None, "no key report.json"),
    ({}, "no key report.json"),
    ({"other.json": "{}"}, "no key report.json"),
    ({REPORT_KEY: ""}, "no key report.json"),
    ({REPORT_KEY: "{not json"}, "malformed report: "),
    ({REPORT_KEY: "[1, 2]"}, "malformed report: "),
    ({REPORT_KEY: "null"}, "malformed report: "),
    (document(format=2), "report format 2, this hub reads 1"),
    (document(format="1"), "report format '1', this hub reads 1"),
    (document(format=None), "report format None, this hub reads 1"),
    (document(reportedAt="yesterday"), "reportedAt 'yesterday' is not RFC 3339"),
    (document(reportedAt=""), "reportedAt '' is not RFC 3339"),
    (document(reportedAt=1767322800), "malformed report: "),
    (document(reportedAt=None), "malformed report: 'reportedAt'"),
    (document(policy=None), "malformed report: 'policy'"),
    (document(pools=None), "malformed report: 'pools'"),
    (document(pools=[{"name": "h100", "mode": "Exclusive", "gpus": "many", "granted": 0}]), "malformed report: "),
    (document(pools=[{"name": "h100", "mode": "Exclusive", "granted": 0}]), "malformed report: 'gpus'"),
    (document(policy={"trustModes": {"Untrusted": "TimeSlicing"}}), "trustModes.Untrusted: TimeSlicing is not allowed"),
    (document(policy={"pools": [{"name": "h100", "mode": "Teleport"}]}), "malformed report: "),
    (document(policy=["pools"]), "malformed report: "),
])
def test_an_unreadable_report_is_refused_with_what_is_wrong(data, says):
    with pytest.raises(ReportUnreadable) as raised:
        parse_report(data)
    assert says in str(raised.value)


def test_a_policy_that_does_not_validate_is_unreadable_not_a_validation_error():
    with pytest.raises(ReportUnreadable, match=r"^malformed report: .*OperatorConfig"):
        parse_report(document(policy={"pools": [{"name": "h100"}]}))


def test_same_capacity_ignores_the_time_only():
    report = example_report()
    later = replace(report, reported_at=datetime(2027, 1, 1, tzinfo=UTC))
    assert same_capacity(report, later)
    assert same_capacity(parse_report(report_data(report)), later)
    assert not same_capacity(None, report)
    assert not same_capacity(report, replace(report, version="0.4.1"))
    assert not same_capacity(report, replace(report, policy={**report.policy, "defaultParentQueue": "other"}))
    more = (replace(report.pools[0], granted=report.pools[0].granted + 1), *report.pools[1:])
    assert not same_capacity(report, replace(report, pools=more))
    moved = (replace(report.pools[0], tenants=("alpha",)), *report.pools[1:])
    assert not same_capacity(report, replace(report, pools=moved))


@pytest.mark.parametrize(("gpus", "granted", "free"), [(8, 0, 8.0), (8, 2.5, 5.5), (8, 8, 0.0), (4, 6.5, 0.0)])
def test_free_gpus_are_never_negative(gpus, granted, free):
    assert PoolCapacity("p", "Exclusive", gpus, granted, ()).free == free
