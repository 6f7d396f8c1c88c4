"""What the pipeline needs from the Helm and kubeconfig components, as small protocols.

The pipeline depends on these shapes only, so it can be driven by the real Helm wrapper and
kubeconfig issuer (gputenant.helm, gputenant.kubeconfigs) through the adapters in
``reconcile.adapters``.
"""

from __future__ import annotations

from typing import Protocol

from gputenant.kubeconfigs import IssuedKubeconfig


class StepError(Exception):
    """A step failed; `transient` decides between retry-with-backoff and stop-until-spec-changes."""

    def __init__(self, reason: str, message: str, transient: bool):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.transient = transient


class Releases(Protocol):
    async def ensure(self, release: str, namespace: str, chart_version: str,
                     values: dict, known_absent: bool = False) -> str:
        """Install or upgrade; returns the installed chart version. ``known_absent``: no revision
        of the release exists, so Helm need not look for one. Raises StepError."""

    async def uninstall(self, release: str, namespace: str) -> None:
        """Remove the release if present. Raises StepError."""


class KubeconfigIssuer(Protocol):
    async def issue(self, tenant: str, roles: list[str], admin_kubeconfig: dict, server_url: str | None,
                    lifetime_seconds: int, revoke: list[str] | None = None) -> list[IssuedKubeconfig]:
        """One token kubeconfig per role inside the virtual cluster (roles: the spec's kubeconfig
        roles, or ``argocd`` for Argo CD's ServiceAccount); the roles in `revoke` get a new
        ServiceAccount, which ends every token issued before. Raises StepError."""

    async def bind_oidc_owners(self, tenant: str, admin_kubeconfig: dict, binding: dict | None) -> None:
        """Put the owners' OIDC binding in place inside the virtual cluster (None: remove it).
        Raises StepError."""

    async def unanswered(self, admin_kubeconfig: dict) -> str | None:
        """None when the virtual cluster's API answers through the kubeconfig's server within a few
        seconds; otherwise why not (it did not answer, or answered with an error)."""
