"""The hub's round: read the members, place the new tenants, write each decision where Argo CD's
ApplicationSet reads it, show every tenant's state on its member, hand the owners their kubeconfigs;
and a hub tenant's deletion carried to its member.

A round runs every `fleet.pollSeconds`, and at once when a hub tenant is created, changed or
deleted (`wake`). Its requests do not grow with the tenants for reads: one LIST of the member
Secrets, of the hub tenants and of the placements, and per member one GET and one LIST. It writes
only what changed: a placement when a tenant is first placed (or its reasons for staying unplaced
change), a tenant's status when what its member says changes, a kubeconfig copy when the member
issued a new one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.conversion import ConversionError
from gputenant.api.group import ARGOCD_APPLICATION_API_VERSION
from gputenant.api.hub import GpuTenant, GpuTenantSpec, spec_from_stored
from gputenant.api.status import FLEET
from gputenant.config.models import OperatorConfig
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
from gputenant.fleet.view import hub_status, kubeconfig_copy, kubeconfig_objects, source_of, wanted_kubeconfigs
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile.steps.namespace import operator_access_binding
from gputenant.tenant_status.conditions import as_status, find, parse, set_condition
from gputenant.tenant_status.writers import write_fleet
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)

DELETION_APPROVED = "argocd.argoproj.io/deletion-approved"


class StillOnMember(Exception):
    """A hub tenant's deletion waits: its member still has it, or cannot be read."""


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
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last: FleetRound = field(default_factory=FleetRound)
    _anchored: bool = False
    _copied: dict[tuple[str, str], str] = field(default_factory=dict)
    """(tenant, Secret) -> the member Secret's source (`view.source_of`) last copied."""
    _shared: dict[str, list[dict]] = field(default_factory=dict)
    """Tenant -> the namespace and Role last applied for its kubeconfig copies."""

    def __post_init__(self) -> None:
        self.reader = MemberReader(self.client, self.config)

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
        now = datetime.now(UTC)
        namespace = self.config.fleet.argocd_namespace
        views = await self.reader.read(now)
        if not self._anchored:
            await self.client.apply(anchor_object(namespace))
            await self.client.apply_status(API_VERSION, PLACEMENT_KIND, anchor_object(namespace)["metadata"]["name"],
                                           {"decisions": []}, FLEET, namespace=namespace)
            self._anchored = True
        tenants = await self._tenants()
        placements = {p["metadata"]["name"]: p for p in await self.client.list(
            API_VERSION, PLACEMENT_KIND, namespace=namespace, label_selector=TENANT_LABEL)}
        by_cluster = {view.member.name: view for view in views}
        members = [view.member for view in views]
        pending = self._pending(tenants, placements, by_cluster)
        decided: dict[str, Placement] = {}
        for body, spec in tenants:
            name = body["metadata"]["name"]
            current = decided_cluster(placements.get(name))
            placement = place(name, spec, members, current=current, now=now,
                              max_age_seconds=self.config.fleet.report_max_age_seconds, pending=pending)
            if current is None and placement.cluster and placement.pool:
                pending[(placement.cluster, placement.pool)] += spec.gpu.quota
            decided[name] = placement
            await self._write_placement(body, placements.get(name), placement, kept=current is not None)
            view = by_cluster.get(placement.cluster) if placement.cluster else None
            member_tenant = view.tenants.get(name) if view and view.tenants is not None else None
            await self._write_status(body, placement, view, member_tenant)
            if view is not None and member_tenant is not None:
                try:
                    await self._copy_kubeconfigs(body, view.member.name, member_tenant)
                except ApiError as error:
                    log.warning("fleet: kubeconfigs of tenant %s not copied from %s: %s; next round",
                                name, view.member.name, error)
        self.last = FleetRound(views, decided)
        return self.last

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

    async def _copy_kubeconfigs(self, body: dict, cluster: str, member_tenant: dict) -> None:
        """The owners' kubeconfigs, copied from the member when it issued new ones."""
        tenant = GpuTenant.from_body(body)
        shared = kubeconfig_objects(tenant, self.config,
                                    operator_access_binding(self.config, naming.host_namespace(tenant.name, self.config)))
        if self._shared.get(tenant.name) != shared:
            for obj in shared:
                await self.client.apply(obj)
            self._shared[tenant.name] = shared
        client = self.reader.client_of(cluster)
        member_namespace = (member_tenant.get("status") or {}).get("namespace")
        if client is None or not member_namespace:
            return
        for secret_name in wanted_kubeconfigs(member_tenant):
            secret = await client.get("v1", "Secret", secret_name, member_namespace)
            if secret is None or self._copied.get((tenant.name, secret_name)) == source_of(cluster, secret):
                continue
            await self.client.apply(kubeconfig_copy(tenant.name, self.config, cluster, secret))
            self._copied[(tenant.name, secret_name)] = source_of(cluster, secret)

    async def offboard(self, body: dict) -> None:
        """A hub tenant's deletion (approved on the hub, by its Application's Prune=confirm as on a
        single cluster): its decision withdrawn, so the ApplicationSet deletes its Application; that
        deletion approved, so Argo CD deletes the member's tenant (Delete=confirm) and the member
        offboards it. StillOnMember until the member no longer has it; then the hub's kubeconfig
        copies go. An unreachable member keeps the deletion waiting: nothing is assumed gone."""
        name = body["metadata"]["name"]
        namespace = self.config.fleet.argocd_namespace
        placement = await self.client.get(API_VERSION, PLACEMENT_KIND, name, namespace)
        cluster = decided_cluster(placement) or ((body.get("status") or {}).get("fleet") or {}).get("cluster")
        if placement is not None:
            await self.client.delete(API_VERSION, PLACEMENT_KIND, name, namespace)
        self.wake.set()
        if cluster is not None:
            await self._approve_application_deletion(name)
            views = {view.member.name: view for view in await self.reader.read(datetime.now(UTC))}
            view = views.get(cluster)
            if view is not None and view.tenants is None:
                raise StillOnMember(f"member {cluster} cannot be read ({view.member.problem}); the tenant's deletion "
                                    "waits until it can")
            if view is not None and view.tenants is not None and name in view.tenants:
                raise StillOnMember(f"waiting for member {cluster} to offboard the tenant")
        await self.client.delete("v1", "Namespace", naming.host_namespace(name, self.config))
        self._shared.pop(name, None)
        for key in [key for key in self._copied if key[0] == name]:
            del self._copied[key]

    async def _approve_application_deletion(self, tenant: str) -> None:
        """Approve the deletion of the tenant's Application once the ApplicationSet started it (Argo
        CD takes an approval no older than the deletion)."""
        name = f"{self.config.fleet.application_name_prefix}{tenant}"
        application = await self.client.get(ARGOCD_APPLICATION_API_VERSION, "Application", name,
                                            self.config.fleet.argocd_namespace)
        if application is None or not application["metadata"].get("deletionTimestamp"):
            return
        approved = (application["metadata"].get("annotations") or {}).get(DELETION_APPROVED, "")
        if approved >= application["metadata"]["deletionTimestamp"]:
            return
        await self.client.patch(ARGOCD_APPLICATION_API_VERSION, "Application", name,
                                {"metadata": {"annotations": {DELETION_APPROVED: rfc3339(datetime.now(UTC))}}},
                                namespace=self.config.fleet.argocd_namespace)

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
