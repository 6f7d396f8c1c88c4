"""The owners' kubeconfigs on the hub: copied from the member when it issued new ones, removed when
it stops naming them, and the hub namespace that holds them removed with the tenant. What was
copied is kept in memory: after a restart each is copied once more."""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant import naming
from gputenant.api.hub import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.fleet.view import COPIES_COMPONENT, kubeconfig_copy, kubeconfig_objects, wanted_kubeconfigs
from gputenant.kube import KubeClient
from gputenant.reconcile.steps.namespace import operator_access_binding


@dataclass
class KubeconfigCopies:
    client: KubeClient
    config: OperatorConfig
    _copied: dict[str, dict[str, str]] = field(default_factory=dict)
    """Tenant -> Secret -> the member status entry it was copied for."""
    _shared: dict[str, list[dict]] = field(default_factory=dict)
    """Tenant -> the namespace and Roles last applied for its copies."""

    async def sync(self, tenant: GpuTenant, cluster: str, member: KubeClient, member_tenant: dict,
                   member_prefix: str) -> None:
        """Copy what the member issued anew (one GET per new kubeconfig, none while nothing changed)."""
        namespace = naming.host_namespace(tenant.name, self.config)
        shared = kubeconfig_objects(tenant, self.config, operator_access_binding(self.config, namespace))
        if self._shared.get(tenant.name) != shared:
            for obj in shared:
                await self.client.apply(obj)
            if not any(obj["kind"] == "Role" for obj in shared):
                await self.client.delete("rbac.authorization.k8s.io/v1", "RoleBinding",
                                         naming.KUBECONFIGS_BINDING_NAME, namespace)
                await self.client.delete("rbac.authorization.k8s.io/v1", "Role", naming.KUBECONFIGS_ROLE_NAME, namespace)
            self._shared[tenant.name] = shared
        wanted = wanted_kubeconfigs(tenant, member_tenant)
        copied = self._copied.setdefault(tenant.name, {})
        member_namespace = f"{member_prefix}{tenant.name}"
        for secret_name, entry in wanted.items():
            if copied.get(secret_name) == entry:
                continue
            secret = await member.get("v1", "Secret", secret_name, member_namespace)
            if secret is None:
                continue
            await self.client.apply(kubeconfig_copy(tenant.name, self.config, cluster, secret))
            copied[secret_name] = entry
        for secret_name in set(copied) - set(wanted):
            await self.client.delete("v1", "Secret", secret_name, namespace)
            del copied[secret_name]

    async def remove(self, tenant: str) -> None:
        """The hub namespace of the tenant's copies, if it is the one the hub made."""
        namespace = naming.host_namespace(tenant, self.config)
        live = await self.client.get("v1", "Namespace", namespace)
        labels = ((live or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(naming.TENANT_LABEL) == tenant and labels.get(naming.COMPONENT_LABEL) == COPIES_COMPONENT:
            await self.client.delete("v1", "Namespace", namespace)
        self._shared.pop(tenant, None)
        self._copied.pop(tenant, None)
