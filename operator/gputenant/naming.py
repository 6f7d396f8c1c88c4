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
REVOKE_ANNOTATION = f"{GROUP}/revoke-kubeconfigs"
"""Set to any new value on a GpuTenant to revoke its kubeconfigs now: their ServiceAccounts are made
anew, so every token issued before stops working, and new kubeconfigs are issued."""
KUBECONFIG_EXPIRES_ANNOTATION = f"{GROUP}/expires-at"
"""On each kubeconfig Secret: when its token expires (RFC 3339), so rotation needs no token parsing."""
QUEUE_LABEL = "kai.scheduler/queue"
KAI_FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
"""KAI's requests for a share of one GPU: a portion (0 < x < 1) or MiB of its memory."""

# Objects in the tenant's host namespace (one of each per namespace, so fixed names).
RESOURCE_QUOTA_NAME = "gputenant-quota"
LIMIT_RANGE_NAME = "gputenant-defaults"
ISOLATION_POLICY_NAME = "gputenant-isolation"
VCLUSTER_API_POLICY_NAME = "gputenant-vcluster-api"
VCLUSTER_EGRESS_POLICY_NAME = "gputenant-vcluster-egress"
OWNERS_BINDING_NAME = "gputenant-owners"
WAKE_CONFIGMAP = "gputenant-wake"
"""The wake request: the tenant's owners (and nobody else) may write its ``data.request``."""
WAKE_ROLE_NAME = "gputenant-wake"
WAKE_BINDING_NAME = "gputenant-wake-owners"
KUBECONFIGS_ROLE_NAME = "gputenant-kubeconfigs"
KUBECONFIGS_BINDING_NAME = "gputenant-kubeconfigs-owners"
"""The owners' own Role: `get` on the issued kubeconfig Secrets, which no member role grants."""
OIDC_KUBECONFIG_ROLE = "oidc"
"""Kubeconfig Secret ``<tenant>-kubeconfig-oidc``: the kubelogin kubeconfig, no credential in it."""
OIDC_CA_CONFIGMAP = "gputenant-oidc-ca"
"""spec.vcluster.oidc.caBundle, mounted into the vCluster control-plane pod for --oidc-ca-file."""
OPERATOR_ACCESS_BINDING_NAME = "gpu-tenant-operator"
"""The operator's own RoleBinding (to config.tenantNamespaceClusterRole) in each host namespace."""
OPERATOR_ACCESS_COMPONENT = "operator-access"


def tenant_labels(tenant: str, component: str) -> dict[str, str]:
    return {TENANT_LABEL: tenant, MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: component}


def host_namespace(tenant: str, config: OperatorConfig) -> str:
    return f"{config.namespace_prefix}{tenant}"


def tenant_of_namespace(namespace: str, config: OperatorConfig) -> str | None:
    """The tenant whose host namespace `namespace` is, by name; None for any other namespace."""
    prefix = config.namespace_prefix
    return namespace[len(prefix):] if namespace.startswith(prefix) and len(namespace) > len(prefix) else None


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


def role_name(role: str) -> str:
    """Host-namespace Role for a member role (view, edit, admin); owners are bound to admin."""
    return f"gputenant-{role}"


def members_binding_name(role: str) -> str:
    return f"gputenant-members-{role}"


def vcluster_pod_labels(tenant: str) -> dict[str, str]:
    """Labels the vcluster chart puts on its control-plane pods."""
    return {"app": "vcluster", "release": release_name(tenant)}


def vcluster_in_cluster_server(tenant: str, config: OperatorConfig) -> str:
    """The vCluster API as the operator reaches it: Service <release> port 443 in the host namespace."""
    return f"https://{release_name(tenant)}.{host_namespace(tenant, config)}.svc:443"
