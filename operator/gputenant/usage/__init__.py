"""GPU allocation against use per tenant, from DCGM exporter series in Prometheus: `model` (pure)
joins the series to tenants by host namespace and judges each GPU; `prometheus` asks for them."""

from gputenant.usage.model import (
    GpuSample,
    TenantUsage,
    format_usage_table,
    judge_usage,
    tenant_namespaces,
    usage_figures,
)
from gputenant.usage.prometheus import PrometheusError, UsageQueries, read_usage

__all__ = ["GpuSample", "PrometheusError", "TenantUsage", "UsageQueries", "format_usage_table", "judge_usage",
           "read_usage", "tenant_namespaces", "usage_figures"]
