"""The GPU usage loop: allocation against use per tenant, shares and the GPU-memory sentinel, from
Prometheus and the cluster's pods (``pools.gpu_round``, docs/metrics.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.metrics import OperatorMetrics
from gputenant.pools.gpu_round import observe_gpus
from gputenant.usage import PrometheusError, UsageQueries
from gputenant.usage.sentinel import UnheldMemory

log = logging.getLogger(__name__)


async def keep_usage(client: KubeClient, config: OperatorConfig, metrics: OperatorMetrics, prometheus_url: str,
                     window: str, period_seconds: float,
                     on_unheld: Callable[[list[UnheldMemory]], None] = lambda _: None) -> None:
    """The GPU observations every period; what the sentinel reports goes to `on_unheld` (the pool
    report). A failed read is a warning; the last figures stay until the next one succeeds."""
    queries = UsageQueries.over(window, f"{config.namespace_prefix}.+")
    while True:
        try:
            on_unheld(await observe_gpus(client, config, metrics, prometheus_url, queries))
        except (ApiError, PrometheusError) as error:
            log.warning("GPU usage not read: %s; retrying in %gs", error, period_seconds)
        await asyncio.sleep(period_seconds)
