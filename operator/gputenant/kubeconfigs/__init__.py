"""Token kubeconfigs for a tenant's virtual cluster: a ServiceAccount per role inside the vCluster,
a bound token with an expiry, rotated before it runs out."""

from gputenant.kubeconfigs.issue import (
    ARGOCD_ROLE,
    ROLE_CLUSTER_ROLES,
    ROTATE_AFTER_FRACTION,
    IssuedKubeconfig,
    KubeconfigIssueError,
    issue_kubeconfigs,
    kubeconfig_secret,
    needs_rotation,
    service_account_name,
)

__all__ = [
    "ARGOCD_ROLE", "ROLE_CLUSTER_ROLES", "ROTATE_AFTER_FRACTION", "IssuedKubeconfig", "KubeconfigIssueError", "issue_kubeconfigs",
    "kubeconfig_secret", "needs_rotation", "service_account_name",
]
