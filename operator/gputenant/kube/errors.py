"""API errors, split into the two kinds the reconciler treats differently."""

from __future__ import annotations

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class ApiError(Exception):
    """A non-2xx answer from the API server (or no answer at all: status 0)."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = ""):
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying unchanged: conflicts, throttling, server trouble, connection failures."""
        return self.status == 0 or self.status in TRANSIENT_STATUSES

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def forbidden(self) -> bool:
        return self.status == 403


class NoCluster(Exception):
    """No cluster to talk to: no kubeconfig, one that cannot be loaded, or no in-cluster service
    account. The message is one line saying what was tried and what to do."""
