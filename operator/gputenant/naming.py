"""Names and labels of everything the operator creates for a tenant, in one place.

Render, reconcile, the admission guard and the tests all derive names from here, so a tenant's
objects can always be found (and deleted) by label and by name.
"""

from __future__ import annotations

from gputenant import GROUP
from gputenant.config.models import OperatorConfig

TENANT_LABEL = f"{GROUP}/tenant"
"""On every object made for a tenant, and on its host namespace (the admission guard selects on it)."""
TRUST_LABEL = f"{GROUP}/trust"
COMPONENT_LABEL = f"{GROUP}/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-tenant-operator"
FINALIZER = f"{GROUP}/finalizer"
ROTATE_ANNOTATION = f"{GROUP}/rotate-kubeconfigs"
"""Set to any new value on a GpuTenant to rotate its kubeconfigs now."""
QUEUE_LABEL = "kai.scheduler/queue"


def tenant_labels(tenant: str, component: str) -> dict[str, str]:
    return {TENANT_LABEL: tenant, MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: component}


def host_namespace(tenant: str, config: OperatorConfig) -> str:
    return f"{config.namespace_prefix}{tenant}"


def queue_name(tenant: str) -> str:
    return tenant


def release_name(tenant: str) -> str:
    """The vCluster Helm release; vCluster writes its admin kubeconfig to ``vc-<release>``."""
    return tenant


def vcluster_secret_name(tenant: str) -> str:
    return f"vc-{release_name(tenant)}"


def kubeconfig_secret_name(tenant: str, role: str) -> str:
    return f"{tenant}-kubeconfig-{role}"


def argocd_secret_name(tenant: str) -> str:
    return f"gputenant-{tenant}"
