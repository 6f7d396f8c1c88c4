"""The GPU usage loop: allocation against use per tenant, from Prometheus (docs/metrics.md)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from gputenant import GROUP, KIND, VERSION
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.metrics import OperatorMetrics
from gputenant.usage import (
    PrometheusError,
    UsageQueries,
    publish_usage,
    read_usage,
    tenant_namespaces,
    usage_figures,
)

log = logging.getLogger(__name__)


async def keep_usage(client: KubeClient, config: OperatorConfig, metrics: OperatorMetrics, prometheus_url: str,
                     window: str, period_seconds: float) -> None:
    """Read every period into the metrics and each tenant's status.usage (with the idle-sleep
    policy). A failed read is a warning; the last figures stay until the next one succeeds."""
    queries = UsageQueries.over(window, f"{config.namespace_prefix}.+")
    while True:
        try:
            tenants = await client.list(f"{GROUP}/{VERSION}", KIND)
            usage = await asyncio.to_thread(read_usage, prometheus_url, tenant_namespaces(tenants, config), queries)
            metrics.publish_usage(usage_figures(usage))
            await publish_usage(client, tenants, usage, window, datetime.now(UTC))
        except (ApiError, PrometheusError) as error:
            log.warning("GPU usage not read: %s; retrying in %gs", error, period_seconds)
        await asyncio.sleep(period_seconds)
