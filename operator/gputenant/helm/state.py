"""What the operator asks about a tenant's release without running Helm: its revisions as Helm
stores them (Secrets labelled ``owner=helm``), whether one is deployed, and whether Helm must run
at all. The one place that knows Helm's storage format."""

from __future__ import annotations

from gputenant.kube import KubeClient


async def release_revisions(client: KubeClient, namespace: str, release: str) -> list[dict]:
    """Helm keeps each release revision in a Secret labelled owner=helm; reading them costs no
    Helm call, and none at all tells Helm it need not look for the release itself."""
    return await client.list("v1", "Secret", namespace=namespace, label_selector=f"owner=helm,name={release}")


def is_deployed(revisions: list[dict]) -> bool:
    """Whether one of the release's revision Secrets is the deployed one."""
    return any((revision["metadata"].get("labels") or {}).get("status") == "deployed" for revision in revisions)


def helm_needed(recorded_hash: str | None, wanted_hash: str, revisions: list[dict]) -> bool:
    """The one rule for skipping Helm: it runs only when the values hash recorded in the tenant's
    status differs from the wanted one (values or chart version changed) or no revision of the
    release is deployed (never installed, removed by hand, or its last attempt failed)."""
    return recorded_hash != wanted_hash or not is_deployed(revisions)
