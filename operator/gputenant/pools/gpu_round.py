"""One round of the operator's GPU observations, every resync period while it reads Prometheus
(`gputenant run --prometheus-url`): allocation against use per tenant (metrics, status.usage and
the idle-sleep policy), the GPUs each tenant holds by share (the chargeback's series) and the
GPU-memory sentinel. The kopf handlers only loop over it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from gputenant import API_VERSION, KIND
from gputenant.config.models import OperatorConfig
from gputenant.kube import KubeClient
from gputenant.metrics import OperatorMetrics
from gputenant.pools.memory_sentinel import sentinel_round, unheld_figures
from gputenant.pools.shares import placements, tenant_shares
from gputenant.usage import UsageQueries, publish_usage, read_usage, tenant_namespaces, usage_figures
from gputenant.usage.prometheus import read_share_hours
from gputenant.usage.sentinel import UnheldMemory


async def observe_gpus(client: KubeClient, config: OperatorConfig, metrics: OperatorMetrics, prometheus_url: str,
                       queries: UsageQueries) -> list[UnheldMemory]:
    """Read, publish and apply; returns what the sentinel reported (for the pool report). Raises
    ApiError or PrometheusError; what was published before stays."""
    tenants = await client.list(API_VERSION, KIND)
    usage = await asyncio.to_thread(read_usage, prometheus_url, tenant_namespaces(tenants, config), queries)
    share_hours = await asyncio.to_thread(read_share_hours, prometheus_url, queries.window, queries.step_seconds)
    for tenant_usage in usage:
        tenant_usage.share_hours = {pool: hours for (tenant, pool), hours in share_hours.items()
                                    if tenant == tenant_usage.tenant}
    metrics.publish_usage(usage_figures(usage))
    pods = await client.list("v1", "Pod")
    shares = tenant_shares(placements(tenants, config), pods)
    metrics.publish_shares((tenant, pool, held) for tenant, (pool, held) in sorted(shares.items()))
    metrics.publish_prices(config.accounting.currency, config.accounting.price_per_gpu_hour)
    await publish_usage(client, tenants, usage, queries.window, datetime.now(UTC), config.accounting)
    unheld = await sentinel_round(client, config, prometheus_url, datetime.now(UTC), pods)
    metrics.publish_unheld_memory(unheld_figures(unheld))
    return unheld
