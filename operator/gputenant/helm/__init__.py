"""The tenant's vCluster as a Helm release: install or upgrade only when needed, refuse unsafe
version jumps, and tell transient failures from permanent ones."""

from gputenant.helm.errors import (
    ChartVersionMismatchError,
    HelmAdmissionDeniedError,
    HelmError,
    HelmForbiddenError,
    InvalidValuesError,
    PermanentHelmError,
    TransientHelmError,
    UpgradePathError,
    classify_helm_failure,
)
from gputenant.helm.releases import (
    ChartRef,
    HelmAction,
    HelmCounters,
    HelmOutcome,
    VClusterReleases,
    default_helm_path,
)
from gputenant.helm.state import helm_needed, is_deployed, release_revisions
from gputenant.helm.versions import check_upgrade_path, values_hash

__all__ = [
    "ChartRef", "ChartVersionMismatchError", "HelmAction", "HelmAdmissionDeniedError", "HelmCounters",
    "HelmError", "HelmForbiddenError", "HelmOutcome",
    "InvalidValuesError", "PermanentHelmError", "TransientHelmError", "UpgradePathError",
    "VClusterReleases", "check_upgrade_path", "classify_helm_failure", "default_helm_path", "helm_needed",
    "is_deployed", "release_revisions", "values_hash",
]
