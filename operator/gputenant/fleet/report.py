"""A member's capacity report: what the hub needs to place a tenant there, in one small document.

The member writes it to a ConfigMap in its own operator namespace (`fleet.reporter`); the hub reads
it with the credentials Argo CD already holds for the member (`fleet.members`). So a member holds no
credential for the hub, a compromised member cannot write another member's report, and the hub's
read of a member is one GET. The report carries the part of the member's configuration the policy
decides from (pools, trust modes, parent queues), so the hub runs the member's own policy
(`policy.decide`) and predicts the mechanism and pool the member will choose, and each pool's GPUs
and what tenants are guaranteed there (`gputenant pools`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from pydantic import ValidationError

from gputenant.config.models import OperatorConfig
from gputenant.pools.report import PoolReport
from gputenant.timefmt import parse_rfc3339, rfc3339

REPORT_KEY = "report.json"
REPORT_FORMAT = 1
POLICY_FIELDS = ("pools", "trustModes", "parentQueues", "defaultParentQueue", "namespacePrefix")
"""The member configuration's fields the hub needs: those `policy.decide` reads, and where the
member keeps a tenant's kubeconfigs (its namespace prefix)."""


class ReportUnreadable(ValueError):
    """The report is missing, malformed or from a format this hub does not read."""


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    mode: str
    gpus: int
    """GPUs the pool can promise."""
    granted: float
    """GPUs guaranteed to the member's tenants."""
    tenants: tuple[str, ...]
    problems: tuple[str, ...] = ()

    @property
    def free(self) -> float:
        return max(0.0, self.gpus - self.granted)


@dataclass(frozen=True)
class MemberReport:
    reported_at: datetime
    version: str
    """The member operator's version."""
    policy: dict
    """The member configuration's POLICY_FIELDS, by alias."""
    pools: tuple[PoolCapacity, ...]

    def pool(self, name: str) -> PoolCapacity | None:
        return next((pool for pool in self.pools if pool.name == name), None)

    @cached_property
    def config(self) -> OperatorConfig:
        """The member's policy configuration (every other field its default), validated once per
        report rather than once per tenant and round."""
        return OperatorConfig.model_validate(self.policy)

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(tenant for pool in self.pools for tenant in pool.tenants)


def build_report(config: OperatorConfig, reports: list[PoolReport], now: datetime, version: str) -> MemberReport:
    dumped = config.model_dump(mode="json", by_alias=True)
    return MemberReport(
        reported_at=now, version=version, policy={key: dumped[key] for key in POLICY_FIELDS},
        pools=tuple(PoolCapacity(name=r.name, mode=r.mode, gpus=r.capacity, granted=r.granted,
                                 tenants=tuple(sorted(r.tenants)), problems=tuple(r.problems)) for r in reports))


def report_data(report: MemberReport) -> dict[str, str]:
    """The ConfigMap's data."""
    document = {
        "format": REPORT_FORMAT, "reportedAt": rfc3339(report.reported_at), "version": report.version,
        "policy": report.policy,
        "pools": [{"name": p.name, "mode": p.mode, "gpus": p.gpus, "granted": p.granted, "tenants": list(p.tenants),
                   "problems": list(p.problems)} for p in report.pools],
    }
    return {REPORT_KEY: json.dumps(document, sort_keys=True, separators=(",", ":"))}


def same_capacity(old: MemberReport | None, new: MemberReport) -> bool:
    """Whether two reports say the same apart from their time (a report is renewed on change, or
    once half its trusted age has passed)."""
    return old is not None and (old.version, old.policy, old.pools) == (new.version, new.policy, new.pools)


def parse_report(data: dict[str, str] | None) -> MemberReport:
    """The report of a ConfigMap's data; ReportUnreadable names what is wrong."""
    text = (data or {}).get(REPORT_KEY)
    if not text:
        raise ReportUnreadable(f"no key {REPORT_KEY}")
    try:
        document = json.loads(text)
        if document.get("format") != REPORT_FORMAT:
            raise ReportUnreadable(f"report format {document.get('format')!r}, this hub reads {REPORT_FORMAT}")
        reported_at = parse_rfc3339(document["reportedAt"])
        if reported_at is None:
            raise ReportUnreadable(f"reportedAt {document['reportedAt']!r} is not RFC 3339")
        report = MemberReport(
            reported_at=reported_at, version=str(document.get("version", "")), policy=dict(document["policy"]),
            pools=tuple(PoolCapacity(name=p["name"], mode=p["mode"], gpus=int(p["gpus"]), granted=float(p["granted"]),
                                     tenants=tuple(p.get("tenants", ())), problems=tuple(p.get("problems", ())))
                        for p in document["pools"]))
        report.config  # noqa: B018 - validated here, so an unreadable policy is the report's problem
    except ReportUnreadable:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as error:
        raise ReportUnreadable(f"malformed report: {error}") from None
    return report
