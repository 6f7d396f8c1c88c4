"""GPU allocation against use per tenant, from DCGM exporter series in Prometheus: `model` (pure)
joins the series to tenants by host namespace and judges each GPU; `prometheus` asks for them;
`summary` and `idle` (pure) make the status summary and the idle-sleep verdict, which `publish`
writes and applies."""

from gputenant.usage.model import (
    GpuSample,
    TenantUsage,
    format_usage_table,
    judge_usage,
    tenant_namespaces,
    usage_figures,
)
from gputenant.usage.prometheus import PrometheusError, UsageQueries, read_usage
from gputenant.usage.publish import Published, publish_usage

__all__ = ["GpuSample", "PrometheusError", "Published", "TenantUsage", "UsageQueries", "format_usage_table",
           "judge_usage", "publish_usage", "read_usage", "tenant_namespaces", "usage_figures"]
