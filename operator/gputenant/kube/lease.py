"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection package does it, so
that of several operator replicas exactly one reconciles.

A candidate takes the Lease when nobody holds it or when its record (holder, renewTime) has not
changed for leaseDurationSeconds *as this candidate observed it* (its own monotonic clock, as
client-go does, so clock skew between nodes does not matter). Every write carries the Lease's
resourceVersion, so two candidates cannot both win: the loser gets 409 and tries again later. The
leader renews every `retry_seconds`; if it has not renewed for `renew_deadline_seconds` (shorter
than the lease, so it stops before anyone else may start) it has lost the Lease and must stop
reconciling at once. On a graceful stop it releases the Lease, so a standby takes over without
waiting for it to expire.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from aiohttp import web

from gputenant.kube.client import KubeClient
from gputenant.kube.errors import ApiError
from gputenant.timefmt import rfc3339_micro

log = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"
LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2
"""client-go's defaults for controllers (15 s lease, 10 s renew deadline, 2 s retry period)."""


@dataclass
class LeaseElector:
    client: KubeClient
    namespace: str
    name: str
    identity: str
    lease_seconds: int = LEASE_SECONDS
    renew_deadline_seconds: float = RENEW_DEADLINE_SECONDS
    retry_seconds: float = RETRY_SECONDS
    _observed: tuple | None = field(default=None, repr=False)
    _observed_at: float = field(default=0.0, repr=False)

    async def _path(self) -> str:
        return (await self.client.resource(LEASE_API, "Lease")).path(self.namespace, self.name)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        now = rfc3339_micro(datetime.now(UTC))
        lease = await self.client.get(LEASE_API, "Lease", self.name, self.namespace)
        ours = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds, "renewTime": now}
        if lease is None:
            try:
                await self.client.create({"apiVersion": LEASE_API, "kind": "Lease",
                                          "metadata": {"name": self.name, "namespace": self.namespace},
                                          "spec": {**ours, "acquireTime": now, "leaseTransitions": 0}})
            except ApiError as error:
                if error.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = (holder, spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        if holder and holder != self.identity and \
                time.monotonic() - self._observed_at < spec.get("leaseDurationSeconds", self.lease_seconds):
            return False
        if holder != self.identity:
            ours.update(acquireTime=now, leaseTransitions=spec.get("leaseTransitions", 0) + 1)
        lease["spec"] = {**spec, **ours}
        try:
            await self.client.request("PUT", await self._path(), body=lease)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True

    async def acquire(self) -> None:
        """Return once this candidate is the leader; meanwhile try every `retry_seconds`."""
        announced = False
        while not await self._attempt():
            if not announced:
                log.info("standing by: the Lease %s/%s is held by another replica", self.namespace, self.name)
                announced = True
            await asyncio.sleep(self.retry_seconds)
        log.info("leading: holding the Lease %s/%s as %s", self.namespace, self.name, self.identity)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew until cancelled; call `on_lost` once a renewal has not succeeded for the renew
        deadline."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_seconds)
            if await self._attempt():
                renewed = time.monotonic()
            elif time.monotonic() - renewed > self.renew_deadline_seconds:
                log.error("lost the Lease %s/%s: not renewed for %g s", self.namespace, self.name,
                          self.renew_deadline_seconds)
                on_lost()
                return

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except ApiError as error:
            log.warning("Lease %s/%s: %s", self.namespace, self.name, error)
            return False

    async def release(self) -> None:
        """Give the Lease up if this candidate holds it (an empty holder that expires in 1 s)."""
        try:
            lease = await self.client.get(LEASE_API, "Lease", self.name, self.namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(holderIdentity="", leaseDurationSeconds=1,
                                 renewTime=rfc3339_micro(datetime.now(UTC)))
            await self.client.request("PUT", await self._path(), body=lease)
        except ApiError as error:
            log.warning("could not release the Lease %s/%s: %s", self.namespace, self.name, error)


async def acquire_standing_by(elector: LeaseElector, liveness_url: str | None) -> None:
    """`elector.acquire()`, answering the liveness probe meanwhile (kopf serves it only once it
    runs), so the kubelet does not restart a replica for standing by."""
    async def standing_by(_: web.Request) -> web.Response:
        return web.json_response({"standby": True})

    runner = None
    if liveness_url:
        url = urlsplit(liveness_url)
        app = web.Application()
        app.router.add_get(url.path or "/", standing_by)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, url.hostname, url.port).start()
    try:
        await elector.acquire()
    finally:
        if runner is not None:
            await runner.cleanup()
