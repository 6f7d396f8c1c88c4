"""The hub's choice of a member cluster for a tenant, and why every other member was not chosen.

Pure: members as the hub last read them in, a placement out. A tenant already placed stays where it
is whatever the capacity, reachability or cordon of its member (sticky; moving is an explicit
operation, docs/fleet.md). A new tenant goes to the member, among those its spec.placement allows
and that are neither cordoned, unreachable nor stale, whose own policy (`policy.decide` on the
member's reported configuration) grants it a pool with free GPUs for its quota; the most free GPUs
left wins, then the name."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec
from gputenant.fleet.report import MemberReport
from gputenant.policy.choose import decide
from gputenant.timefmt import rfc3339


@dataclass(frozen=True)
class Member:
    """A member cluster as the hub sees it: its Argo CD cluster Secret and its last report."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    cordoned: bool = False
    report: MemberReport | None = None
    problem: str | None = None
    """Why its report could not be read (unreachable, forbidden, malformed); None when it was."""
    problem_reason: str = reasons.MEMBER_UNREACHABLE
    """The problem's reason: MemberUnreachable, or ReportUnreadable (the member answered)."""
    tenant_names: frozenset[str] = frozenset()
    """The GpuTenants the member has: a new tenant is never placed where its name is taken."""


@dataclass(frozen=True)
class Verdict:
    """One member's answer for one tenant."""

    cluster: str
    fits: bool
    reason: str
    message: str
    free_after: float = 0.0
    """GPUs its pool has free once the tenant's quota is granted (the tie-breaker)."""
    pool: str | None = None
    """The pool the member's policy chooses (None: no GPUs asked, or it does not fit)."""


@dataclass(frozen=True)
class Placement:
    cluster: str | None
    reason: str
    message: str
    verdicts: tuple[Verdict, ...] = ()

    @property
    def pool(self) -> str | None:
        """The pool the chosen member's policy grants the tenant (None when kept or not placed)."""
        return next((v.pool for v in self.verdicts if v.fits and v.cluster == self.cluster), None)


def place(name: str, spec: GpuTenantSpec, members: list[Member], *, current: str | None, now: datetime,
          max_age_seconds: float, pending: dict[tuple[str, str], float] | None = None) -> Placement:
    """Where tenant `name` goes. `current`: its cluster so far (sticky). `pending`: GPUs the hub has
    placed on (cluster, pool) that the member's report does not count yet."""
    if current is not None:
        registered = any(member.name == current for member in members)
        message = (f"placed on {current}; a placed tenant stays there (docs/fleet.md, \"Moving a tenant\")"
                   if registered else
                   f"placed on {current}, which is no longer a registered member; the placement is kept, "
                   "nothing is moved or deleted (register the member again, or move the tenant)")
        return Placement(current, reasons.PLACED if registered else reasons.MEMBER_NOT_REGISTERED, message)
    verdicts = tuple(judge(name, spec, member, now=now, max_age_seconds=max_age_seconds, pending=pending or {})
                     for member in sorted(members, key=lambda member: member.name))
    fitting = [verdict for verdict in verdicts if verdict.fits]
    if not fitting:
        summary = "; ".join(f"{v.cluster}: {v.reason}: {v.message}" for v in verdicts) or "no member is registered"
        return Placement(None, reasons.NO_MEMBER_FITS, f"no member can take the tenant ({summary})", verdicts)
    chosen = min(fitting, key=lambda verdict: (-verdict.free_after, verdict.cluster))
    return Placement(chosen.cluster, reasons.PLACED, f"placed on {chosen.cluster}: {chosen.message}", verdicts)


def judge(name: str, spec: GpuTenantSpec, member: Member, *, now: datetime, max_age_seconds: float,
          pending: dict[tuple[str, str], float]) -> Verdict:
    """Whether `member` can take the tenant, and why (not)."""
    refusal = spec.placement.admits(member.name, member.labels) if spec.placement else None
    if refusal:
        return Verdict(member.name, False, reasons.NOT_SELECTED, refusal)
    if name in member.tenant_names:
        return Verdict(member.name, False, reasons.NAME_TAKEN,
                       f"the member already has a GpuTenant named {name}, which the hub did not place there")
    if member.cordoned:
        return Verdict(member.name, False, reasons.CORDONED, "cordoned by the platform team: no new tenant")
    if member.report is None:
        return Verdict(member.name, False, member.problem_reason, member.problem or "no capacity report read yet")
    age = (now - member.report.reported_at).total_seconds()
    if abs(age) > max_age_seconds:
        return Verdict(member.name, False, reasons.REPORT_STALE,
                       f"its capacity report of {rfc3339(member.report.reported_at)} is more than {max_age_seconds:g}s "
                       "old (is its operator running, with fleet.role member?) or ahead of the hub's clock")
    decision = decide(name, spec, member.report.config)
    if not decision.possible:
        return Verdict(member.name, False, decision.reason, decision.message)
    if decision.pool is None:
        return Verdict(member.name, True, decision.reason, "the tenant asks for no GPUs",
                       free_after=sum(pool.free for pool in member.report.pools))
    capacity = member.report.pool(decision.pool.name)
    if capacity is None:
        return Verdict(member.name, False, reasons.POOL_NOT_REPORTED,
                       f"its policy chose pool {decision.pool.name}, which its report does not list")
    if capacity.problems:
        return Verdict(member.name, False, reasons.POOL_HAS_PROBLEMS,
                       f"pool {capacity.name}: {'; '.join(capacity.problems)}")
    free = capacity.free - pending.get((member.name, capacity.name), 0.0)
    quota = spec.gpu.quota
    if quota > free:
        return Verdict(member.name, False, reasons.NO_CAPACITY,
                       f"pool {capacity.name} ({decision.mode.value if decision.mode else capacity.mode}) has "
                       f"{max(free, 0.0):g} of {capacity.gpus} GPUs free; the tenant's gpu.quota is {quota:g}")
    return Verdict(member.name, True, decision.reason,
                   f"pool {capacity.name} ({decision.mode.value if decision.mode else capacity.mode}) has "
                   f"{free:g} of {capacity.gpus} GPUs free for gpu.quota {quota:g}", free_after=free - quota,
                   pool=capacity.name)


def unreported_grant(name: str, spec: GpuTenantSpec, member: Member) -> tuple[str, float] | None:
    """(pool, GPUs) a tenant placed on `member` will be granted there, while the member's report
    does not count it yet (delivered, not reconciled); None once it does, or when it holds none."""
    if member.report is None or name in member.report.tenants:
        return None
    decision = decide(name, spec, member.report.config)
    if not decision.possible or decision.pool is None:
        return None
    return decision.pool.name, spec.gpu.quota
