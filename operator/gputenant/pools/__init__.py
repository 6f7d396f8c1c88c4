"""GPU pools: node labels and the device-plugin ConfigMap they need, and a capacity report."""

from gputenant.pools.plan import PoolConfigError, PoolsPlan, device_plugin_config_data, plan_pools
from gputenant.pools.report import PoolReport, TenantGrant, format_metrics, format_table, grants_from_tenants, pool_reports

__all__ = ["TenantGrant", "PoolConfigError", "PoolReport", "PoolsPlan", "device_plugin_config_data", "format_metrics",
           "format_table", "grants_from_tenants", "plan_pools", "pool_reports"]
