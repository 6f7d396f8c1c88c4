"""The hub's round: read the members, place the new tenants, write each decision where Argo CD's
ApplicationSet reads it, show every tenant's state on its member, hand the owners their kubeconfigs;
and a hub tenant's deletion carried to its member.

A round runs every `fleet.pollSeconds`, and at once when a hub tenant is created, changed or
deleted (`wake`). Its reads grow with the members, not the tenants: one LIST each of the member
Secrets, the hub tenants, the placements and the fleet's Applications, and per member one GET and
one LIST; a member Secret is read only when the member issued a new kubeconfig. It writes only what
changed: a placement when a tenant is first placed (or its reasons for staying unplaced change), a
tenant's status when what its member says changes, a kubeconfig copy when the member issued a new
one. One tenant's failure is logged and the round goes on with the others; rounds and deletions
take turns (`_turn`), so a round never re-creates what a deletion removed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from gputenant.api import conditions as reasons
from gputenant.api.conversion import ConversionError
from gputenant.api.hub import GpuTenant, GpuTenantSpec, spec_from_stored
from gputenant.api.status import FLEET
from gputenant.config.models import OperatorConfig
from gputenant.fleet.applications import (
    application_name,
    approve_deletion,
    refresh_application_set,
    tenant_applications,
)
from gputenant.fleet.copies import KubeconfigCopies
from gputenant.fleet.decision import (
    API_VERSION,
    PLACEMENT_KIND,
    TENANT_LABEL,
    anchor_object,
    decided_cluster,
    placement_object,
    placement_status,
)
from gputenant.fleet.members import TENANTS_API_VERSION, MemberReader, MemberView
from gputenant.fleet.placement import Placement, place, unreported_grant
from gputenant.fleet.view import hub_status, tracked
from gputenant.kube import ApiError, KubeClient
from gputenant.tenant_status.conditions import as_status, find, parse, set_condition
from gputenant.tenant_status.writers import write_fleet
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)


class StillOnMember(Exception):
    """A hub tenant's deletion waits: its Application or its member still has it, or cannot be read."""


@dataclass
class FleetRound:
    """What the last round saw: the members and each tenant's placement (for the probe)."""

    members: list[MemberView] = field(default_factory=list)
    placements: dict[str, Placement] = field(default_factory=dict)


@dataclass
class Hub:
    client: KubeClient
    config: OperatorConfig
    reader: MemberReader = field(init=False)
    copies: KubeconfigCopies = field(init=False)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last: FleetRound = field(default_factory=FleetRound)
    _turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    _anchored: bool = False
    _refresh: bool = False
    """A decision changed this round: the ApplicationSet is asked to read them at its end."""

    def __post_init__(self) -> None:
        self.reader = MemberReader(self.client, self.config)
        self.copies = KubeconfigCopies(self.client, self.config)

    async def run(self) -> None:
        """Rounds, forever: every poll period, or sooner when woken."""
        while True:
            self.wake.clear()
            try:
                await self.round()
            except ApiError as error:
                log.warning("fleet round failed: %s; next round in %gs", error, self.config.fleet.poll_seconds)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.fleet.poll_seconds):
                    await self.wake.wait()

    async def round(self) -> FleetRound:
        async with self._turn:
            return await self._round()

    async def _round(self) -> FleetRound:
        now = datetime.now(UTC)
        namespace = self.config.fleet.argocd_namespace
        views = await self.reader.read()
        if not self._anchored:
            await self.client.apply(anchor_object(namespace))
            await self.client.apply_status(API_VERSION, PLACEMENT_KIND, anchor_object(namespace)["metadata"]["name"],
                                           {"decisions": []}, FLEET, namespace=namespace)
            self._anchored = self._refresh = True
        tenants = await self._tenants()
        placements = {p["metadata"]["name"]: p for p in await self.client.list(
            API_VERSION, PLACEMENT_KIND, namespace=namespace, label_selector=TENANT_LABEL)}
        applications = await tenant_applications(self.client, self.config)
        by_cluster = {view.member.name: view for view in views}
        pending = self._pending(tenants, placements, by_cluster)
        decided: dict[str, Placement] = {}
        for body, spec in tenants:
            name = body["metadata"]["name"]
            try:
                decided[name] = await self._pass(body, spec, placements.get(name), applications.get(name),
                                                 by_cluster, pending, now)
            except Exception:  # noqa: BLE001 - one tenant's failure must not stop the others' placement
                log.exception("fleet: tenant %s skipped this round", name)
        if self._refresh:
            self._refresh = False
            await refresh_application_set(self.client, self.config)
        self.last = FleetRound(views, decided)
        return self.last

    async def _pass(self, body: dict, spec: GpuTenantSpec, live: dict | None, application: dict | None,
                    by_cluster: dict[str, MemberView], pending: defaultdict[tuple[str, str], float],
                    now: datetime) -> Placement:
        name = body["metadata"]["name"]
        current = decided_cluster(live)
        moving_from = self._moving_from(body, current, application, by_cluster)
        if moving_from is not None:
            placement = Placement(moving_from, reasons.MOVING,
                                  f"its placement was withdrawn: placed again once {moving_from} no longer has it "
                                  f"and Argo CD deleted its Application {application_name(self.config, name)}")
        else:
            placement = place(name, spec, [view.member for view in by_cluster.values()], current=current, now=now,
                              max_age_seconds=self.config.fleet.report_max_age_seconds, pending=pending)
            if current is None and placement.cluster and placement.pool:
                pending[(placement.cluster, placement.pool)] += spec.gpu.quota
            await self._write_placement(body, live, placement, kept=current is not None)
        view = by_cluster.get(placement.cluster) if placement.cluster else None
        member_tenant = self._delivered(view, name) if view is not None else None
        await self._write_status(body, placement, view, member_tenant)
        if moving_from is None and view is not None and member_tenant is not None and view.member.report is not None:
            client = self.reader.client_of(view.member.name)
            if client is not None:
                await self.copies.sync(GpuTenant.from_body(body), view.member.name, client, member_tenant,
                                       view.member.report.config.namespace_prefix)
        return placement

    def _moving_from(self, body: dict, current: str | None, application: dict | None,
                     by_cluster: dict[str, MemberView]) -> str | None:
        """The member a tenant without a decision was placed on, while it is still there (its
        Application, or the tenant on the member, or a member that cannot be read); None when the
        tenant is free to be placed."""
        previous = ((body.get("status") or {}).get("fleet") or {}).get("cluster")
        if current is not None or previous is None:
            return None
        view = by_cluster.get(previous)
        still_there = view is None or view.tenants is None or self._delivered(view, body["metadata"]["name"]) is not None
        return previous if application is not None or still_there else None

    def _delivered(self, view: MemberView, name: str) -> dict | None:
        """The member's tenant `name` when the fleet's Application delivered it (Argo CD's tracking
        annotation); None when the member has no such tenant, has one of its own, or was not read."""
        member_tenant = (view.tenants or {}).get(name)
        if member_tenant is None or not tracked(member_tenant, application_name(self.config, name)):
            return None
        return member_tenant

    async def _tenants(self) -> list[tuple[dict, GpuTenantSpec]]:
        """The hub's live tenants, oldest first (first come, first placed)."""
        tenants = []
        for body in await self.client.list(TENANTS_API_VERSION, "GpuTenant"):
            if body["metadata"].get("deletionTimestamp"):
                continue
            try:
                tenants.append((body, spec_from_stored(body.get("spec") or {})))
            except (ValidationError, ConversionError) as error:
                log.warning("fleet: tenant %s not placed, its spec does not validate: %s", body["metadata"]["name"], error)
        return sorted(tenants, key=lambda t: (t[0]["metadata"].get("creationTimestamp", ""), t[0]["metadata"]["name"]))

    @staticmethod
    def _pending(tenants: list[tuple[dict, GpuTenantSpec]], placements: dict[str, dict],
                 by_cluster: dict[str, MemberView]) -> defaultdict[tuple[str, str], float]:
        """GPUs placed on each (member, pool) that the member's report does not count yet."""
        pending: defaultdict[tuple[str, str], float] = defaultdict(float)
        for body, spec in tenants:
            name = body["metadata"]["name"]
            cluster = decided_cluster(placements.get(name))
            view = by_cluster.get(cluster) if cluster else None
            grant = unreported_grant(name, spec, view.member) if view else None
            if cluster and grant:
                pending[(cluster, grant[0])] += grant[1]
        return pending

    async def _write_placement(self, tenant: dict, live: dict | None, placement: Placement, *, kept: bool) -> None:
        """Create the tenant's GpuTenantPlacement, and write its status unless the tenant was placed
        before (the decision and its reasons stay as they were when it was made)."""
        namespace = self.config.fleet.argocd_namespace
        name = tenant["metadata"]["name"]
        if live is None:
            await self.client.apply(placement_object(tenant, namespace))
        if kept:
            return
        status = placement_status(name, placement)
        if live is not None and {key: (live.get("status") or {}).get(key) for key in status} == status:
            return
        await self.client.apply_status(API_VERSION, PLACEMENT_KIND, name, status, FLEET, namespace=namespace)
        if placement.cluster:
            self._refresh = True
            log.info("fleet: tenant %s placed on %s (%s)", name, placement.cluster, placement.message)

    async def _write_status(self, tenant: dict, placement: Placement, view: MemberView | None,
                            member_tenant: dict | None) -> None:
        problem = view.member.problem if view else "it is no longer a registered member (its Argo CD cluster Secret)"
        fleet, (ready, reason, message) = hub_status(placement, member_tenant, problem,
                                                     member_read=view is not None and view.tenants is not None)
        status = tenant.get("status") or {}
        generation = tenant["metadata"].get("generation")
        conditions = parse(status.get("conditions") or [])
        before = find(conditions, reasons.READY)
        if (status.get("fleet") == fleet and status.get("observedGeneration") == generation and before is not None
                and (before.status, before.reason, before.message) == (ready, reason, message)):
            return
        updated = find(set_condition(conditions, reasons.READY, ready, reason, message, generation,
                                     rfc3339(datetime.now(UTC))), reasons.READY)
        await write_fleet(self.client, tenant["metadata"]["name"], {
            "observedGeneration": generation, "fleet": fleet, "conditions": as_status([updated] if updated else [])})

    async def offboard(self, body: dict) -> None:
        """A hub tenant's deletion (approved on the hub, by its Application's Prune=confirm as on a
        single cluster): its decision withdrawn, so the ApplicationSet deletes its Application; that
        deletion approved, so Argo CD deletes the member's tenant (Delete=confirm) and the member
        offboards it. StillOnMember while its Application exists or its member has it or cannot be
        read or is not registered: nothing is assumed gone. Then the hub's kubeconfig copies go."""
        async with self._turn:
            name = body["metadata"]["name"]
            namespace = self.config.fleet.argocd_namespace
            placement = await self.client.get(API_VERSION, PLACEMENT_KIND, name, namespace)
            cluster = decided_cluster(placement) or ((body.get("status") or {}).get("fleet") or {}).get("cluster")
            if placement is not None:
                await self.client.delete(API_VERSION, PLACEMENT_KIND, name, namespace)
                await refresh_application_set(self.client, self.config)
            application = (await tenant_applications(self.client, self.config)).get(name)
            if application is not None:
                await approve_deletion(self.client, self.config, application)
                raise StillOnMember(f"waiting for Argo CD to delete Application {application['metadata']['name']}, "
                                    f"and with it the tenant on {cluster or 'its member'}")
            if cluster is not None:
                await self._wait_until_gone_from(cluster, name)
            await self.copies.remove(name)

    async def _wait_until_gone_from(self, cluster: str, name: str) -> None:
        view = next((v for v in await self.reader.read() if v.member.name == cluster), None)
        if view is None:
            raise StillOnMember(f"member {cluster} is not a registered member: register it again, or, once the "
                                "tenant is offboarded there by hand, remove this tenant's finalizer")
        if view.tenants is None:
            raise StillOnMember(f"member {cluster} cannot be read ({view.member.problem}); the tenant's deletion "
                                "waits until it can")
        if self._delivered(view, name) is not None:
            raise StillOnMember(f"waiting for member {cluster} to offboard the tenant")

    async def close(self) -> None:
        await self.reader.close()


def fleet_summary(last: FleetRound) -> dict:
    """The `fleet` probe: each member (reachable, cordoned, report time, pools) and each tenant's placement."""
    members = {}
    for view in last.members:
        member, report = view.member, view.member.report
        members[member.name] = {
            "labels": member.labels, "cordoned": member.cordoned, "problem": member.problem,
            "reportedAt": rfc3339(report.reported_at) if report else None, "version": report.version if report else None,
            "tenants": sorted(view.tenants) if view.tenants is not None else None,
            "pools": [{"name": p.name, "mode": p.mode, "gpus": p.gpus, "granted": p.granted, "free": p.free}
                      for p in (report.pools if report else ())]}
    return {"members": members,
            "tenants": {name: {"cluster": p.cluster, "reason": p.reason} for name, p in last.placements.items()}}
