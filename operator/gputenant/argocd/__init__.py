"""Argo CD integration: the tenant's virtual cluster as an Argo CD cluster Secret, and the health
check that lets an Application report GpuTenants truthfully (``health.lua``)."""

from gputenant.argocd.cluster import (
    CLUSTER_SECRET_TYPE_LABEL,
    HEALTH_LUA_PATH,
    bearer_token_of,
    cluster_secret,
    health_lua,
)

__all__ = ["CLUSTER_SECRET_TYPE_LABEL", "HEALTH_LUA_PATH", "bearer_token_of", "cluster_secret", "health_lua"]
