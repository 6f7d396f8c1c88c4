"""The GPU pools loop: apply the configuration's pools (node labels, device-plugin ConfigMap) now
and every pools interval, and keep the pool report the `pools` probe and metrics serve."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from gputenant.attestation.run import Attestor
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.metrics import OperatorMetrics
from gputenant.pools import PoolReport
from gputenant.pools.apply import apply_pools, collect_pool_reports
from gputenant.pools.memory_sentinel import attach_unheld_memory
from gputenant.pools.report import pool_figures
from gputenant.timefmt import rfc3339
from gputenant.usage.sentinel import UnheldMemory

log = logging.getLogger(__name__)


def pool_summary(report: PoolReport) -> dict:
    return {"mode": report.mode, "nodes": len(report.nodes), "gpus": report.capacity,
            "granted": report.granted, "burst": report.burst, "overcommit": report.overcommit,
            "tenants": report.tenants, "isolation": report.isolation, "problems": report.problems,
            "gpuMemoryHeldByNoOne": [{"node": m.node, "gpu": m.gpu, "instance": m.instance, "mib": round(m.used_mib),
                                      "since": rfc3339(m.since)} for m in report.unheld_memory]}


@dataclass
class PoolsLoop:
    client: KubeClient
    config: OperatorConfig
    metrics: OperatorMetrics
    interval_seconds: float
    """How often the pools are applied."""
    resync_seconds: float
    """How often the report is refreshed (it follows tenants coming and going)."""
    attestor: Attestor | None = None
    reports: list[PoolReport] = field(default_factory=list)
    """The last report, per pool."""
    unheld_memory: list[UnheldMemory] = field(default_factory=list)
    """What the GPU-memory sentinel last reported (set by the usage loop, every resync period)."""

    @property
    def tick(self) -> float:
        return min(self.interval_seconds, self.resync_seconds)

    async def run(self) -> None:
        """Apply now and every interval (writes only what differs); refresh the report every tick.
        A transient API failure is retried at the next tick; any other (the device-plugin
        namespace missing, RBAC) at the next interval, as retrying it every tick would only
        repeat a failing write (one per resync period in the benchmark's steady state)."""
        loop = asyncio.get_running_loop()
        next_apply = loop.time()
        while True:
            try:
                if loop.time() >= next_apply:
                    await self.apply_once()
                    next_apply = loop.time() + self.interval_seconds
                await self.refresh()
            except ApiError as error:
                retry_in = self.tick if error.transient else self.interval_seconds
                next_apply = loop.time() + retry_in
                log.warning("GPU pools not applied: %s; retrying in %gs", error, retry_in)
            await asyncio.sleep(self.tick)

    async def apply_once(self) -> None:
        result = await apply_pools(self.client, self.config)
        for written in result.written:
            log.info("GPU pools: applied %s", written)
        for problem in result.plan.problems:
            log.warning("GPU pools: %s", problem)
        for blocked in result.blocked:
            log.warning("GPU pools: held back: %s", blocked.message)

    async def refresh(self) -> None:
        """The report served by the `pools` probe and the pool metrics; logged when it changes."""
        reports = await collect_pool_reports(self.client, self.config)
        if self.attestor is not None:
            for report in reports:
                report.isolation = self.attestor.summary(report.name)
            self.metrics.publish_isolation((r.name, r.isolation["isolationVerified"], r.isolation["reason"])
                                           for r in reports if r.isolation)
        attach_unheld_memory(reports, self.unheld_memory)
        self.metrics.publish_pools(pool_figures(reports))
        if reports != self.reports:
            log.info("GPU pools: %s", "; ".join(f"{r.name}: {pool_summary(r)}" for r in reports))
        self.reports = reports
