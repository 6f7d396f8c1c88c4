"""What the operator asks about a tenant's release without running Helm: its revisions as Helm
stores them (Secrets labelled ``owner=helm``), whether one is deployed, and the condition reason
of a Helm failure. The one place that knows Helm's storage format."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.helm.errors import (
    HelmAdmissionDeniedError,
    HelmError,
    HelmForbiddenError,
    InvalidValuesError,
    TransientHelmError,
    UpgradePathError,
)
from gputenant.kube import KubeClient


async def release_revisions(client: KubeClient, namespace: str, release: str) -> list[dict]:
    """Helm keeps each release revision in a Secret labelled owner=helm; reading them costs no
    Helm call, and none at all tells Helm it need not look for the release itself."""
    return await client.list("v1", "Secret", namespace=namespace, label_selector=f"owner=helm,name={release}")


def is_deployed(revisions: list[dict]) -> bool:
    """Whether one of the release's revision Secrets is the deployed one."""
    return any((revision["metadata"].get("labels") or {}).get("status") == "deployed" for revision in revisions)


def condition_reason(error: HelmError) -> str:
    """The VClusterReady reason for a Helm failure."""
    if isinstance(error, TransientHelmError):
        return reasons.HELM_UNAVAILABLE
    if isinstance(error, HelmForbiddenError):
        return reasons.HELM_FORBIDDEN
    if isinstance(error, HelmAdmissionDeniedError):
        return reasons.HELM_ADMISSION_DENIED
    if isinstance(error, UpgradePathError):
        return reasons.UPGRADE_REFUSED
    if isinstance(error, InvalidValuesError):
        return reasons.INVALID_VALUES
    return reasons.HELM_FAILED


def is_transient(error: HelmError) -> bool:
    """Worth retrying unchanged; anything else waits for the spec, configuration or chart to change."""
    return isinstance(error, TransientHelmError)
