"""Token kubeconfigs for a tenant's virtual cluster: a ServiceAccount per role inside the vCluster,
a bound token with an expiry, rotated before it runs out; and everything the operator reads from
kubeconfig Secrets (the one kubeconfig boundary)."""

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
    unanswered,
)
from gputenant.kubeconfigs.tokens import (
    REVOKED,
    ROTATION_ANNOTATION,
    SERVER_ANNOTATION,
    admin_kubeconfig,
    ca_of,
    https_server,
    issue_reason,
    recorded_annotations,
    server_of,
    token_annotations,
    token_lifetime,
    token_of,
    with_server,
)

__all__ = [
    "ARGOCD_ROLE", "REVOKED", "ROLE_CLUSTER_ROLES", "ROTATE_AFTER_FRACTION", "ROTATION_ANNOTATION", "SERVER_ANNOTATION",
    "IssuedKubeconfig", "KubeconfigIssueError", "admin_kubeconfig", "ca_of", "https_server", "issue_kubeconfigs",
    "issue_reason", "kubeconfig_secret", "needs_rotation", "recorded_annotations", "server_of", "service_account_name",
    "token_annotations", "token_lifetime", "token_of", "unanswered", "with_server",
]
