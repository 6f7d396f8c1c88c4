"""The tables `gputenant fleet` prints: members with their pools, then tenants with their placement.
Pure."""

from __future__ import annotations

from datetime import datetime

from gputenant.fleet.members import MemberView
from gputenant.fleet.view import ready_of
from gputenant.tables import align_columns


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def member_rows(views: list[MemberView], now: datetime) -> list[list[str]]:
    rows = [["MEMBER", "STATE", "REPORTED", "POOL", "MODE", "GPUS", "GRANTED", "FREE", "TENANTS"]]
    for view in views:
        member, report = view.member, view.member.report
        state = "cordoned" if member.cordoned else "ready"
        if member.problem:
            state = "unreachable" if report is None else state
        reported = _age((now - report.reported_at).total_seconds()) + " ago" if report else "-"
        tenants = str(len(view.tenants)) if view.tenants is not None else "?"
        pools = report.pools if report else ()
        if not pools:
            rows.append([member.name, state, reported, "-", "-", "-", "-", "-", tenants])
        for index, pool in enumerate(pools):
            first = index == 0
            rows.append([member.name if first else "", state if first else "", reported if first else "", pool.name,
                         pool.mode, str(pool.gpus), f"{pool.granted:g}", f"{pool.free:g}", tenants if first else ""])
    return rows


def tenant_rows(tenants: list[dict]) -> list[list[str]]:
    rows = [["TENANT", "CLUSTER", "READY", "REASON"]]
    for body in sorted(tenants, key=lambda tenant: tenant["metadata"]["name"]):
        fleet = (body.get("status") or {}).get("fleet") or {}
        ready = ready_of(body) or {}
        rows.append([body["metadata"]["name"], fleet.get("cluster") or "-", ready.get("status", "-"),
                     ready.get("reason") or fleet.get("reason") or "-"])
    return rows


def problems(views: list[MemberView]) -> list[str]:
    return [f"{view.member.name}: {view.member.problem}" for view in views if view.member.problem]


def fleet_tables(views: list[MemberView], tenants: list[dict], now: datetime) -> str:
    text = align_columns(member_rows(views, now)) if views else "no member cluster is registered"
    found = problems(views)
    if found:
        text += "\n\n" + "\n".join(found)
    return text + "\n\n" + align_columns(tenant_rows(tenants))
