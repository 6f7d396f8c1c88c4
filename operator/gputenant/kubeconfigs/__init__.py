"""Token kubeconfigs for a tenant's virtual cluster: a ServiceAccount per role inside the vCluster,
a bound token with an expiry, rotated before it runs out; and everything the operator reads from
kubeconfig Secrets (the one kubeconfig boundary)."""

from gputenant.kubeconfigs.issue import (
    ARGOCD_ROLE,
    ROLE_CLUSTER_ROLES,
    ROTATE_AFTER_FRACTION,
    IssuedKubeconfig,
    KubeconfigIssueError,
    in_virtual_cluster,
    issue_kubeconfigs,
    kubeconfig_secret,
    kubeconfig_secret_of,
    needs_rotation,
    rotation_due,
    service_account_name,
    unanswered,
)
from gputenant.kubeconfigs.oidc import (
    OIDC_OWNERS_BINDING,
    OIDC_ROLE,
    binding_hash,
    oidc_kubeconfig,
    oidc_owner_subjects,
    oidc_owners_binding,
    put_oidc_owners_binding,
)
from gputenant.kubeconfigs.tokens import (
    MISSING,
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
    "ARGOCD_ROLE", "MISSING", "OIDC_OWNERS_BINDING", "OIDC_ROLE", "REVOKED", "ROLE_CLUSTER_ROLES", "ROTATE_AFTER_FRACTION", "ROTATION_ANNOTATION", "SERVER_ANNOTATION",
    "IssuedKubeconfig", "KubeconfigIssueError", "admin_kubeconfig", "binding_hash", "ca_of", "https_server",
    "in_virtual_cluster", "issue_kubeconfigs", "kubeconfig_secret_of", "oidc_kubeconfig", "oidc_owner_subjects", "oidc_owners_binding",
    "put_oidc_owners_binding",
    "issue_reason", "kubeconfig_secret", "needs_rotation", "rotation_due", "recorded_annotations", "server_of", "service_account_name",
    "token_annotations", "token_lifetime", "token_of", "unanswered", "with_server",
]
