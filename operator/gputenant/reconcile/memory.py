"""What the reconciler remembers about tenants between passes, keyed by each tenant's uid.

A tenant deleted and created again under the same name is another object with another uid, so it
inherits nothing; `forget` drops a tenant's entry when it is deleted, and a new uid under a known
name drops the old one's, so the memory holds at most one entry per live tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputenant import GROUP

RETRY_ANNOTATION = f"{GROUP}/retry"
"""Changing its value retries a Helm failure that is otherwise not retried (docs/operations.md)."""


@dataclass(frozen=True)
class HelmAttempt:
    """What a Helm install or upgrade depends on: a permanent failure is retried when any part changes."""

    generation: int | None
    values_hash: str
    """Covers the rendered values (from the spec and the operator configuration) and the chart version."""
    retry_request: str
    """The value of the tenant's gputenant.io/retry annotation."""


@dataclass(frozen=True)
class HelmStop:
    attempt: HelmAttempt
    reason: str
    message: str


class TenantMemory:
    """Permanent Helm failures by tenant uid, each with the attempt it happened for, the
    consecutive transient failures of one step (for the backoff), which object steps converged
    on which rendered objects (so a look again while the control plane starts need not re-list them),
    the version the last status write made, and whether the one-time status ownership migration is
    settled."""

    def __init__(self) -> None:
        self._helm_stops: dict[str, HelmStop] = {}
        self._failures: dict[str, tuple[str, int]] = {}
        self._converged: dict[str, dict[str, str]] = {}
        self._uid_of: dict[str, str] = {}
        self._written_version: dict[str, str] = {}
        self._ownership_settled: set[str] = set()
        self._access_confirmed: set[str] = set()

    def helm_stop(self, uid: str, attempt: HelmAttempt) -> HelmStop | None:
        """The failure that holds Helm back for exactly this attempt, or None (then run Helm)."""
        stop = self._helm_stops.get(uid)
        return stop if stop is not None and stop.attempt == attempt else None

    def stop_helm(self, name: str, uid: str, attempt: HelmAttempt, reason: str, message: str) -> None:
        self.seen(name, uid)
        self._helm_stops[uid] = HelmStop(attempt, reason, message)

    def clear_helm(self, uid: str) -> None:
        self._helm_stops.pop(uid, None)

    def count_failure(self, uid: str, step: str) -> int:
        """Note one more failure of `step`; how many in a row it failed (a failure of another step
        starts the count again). Waits and kopf's retries of them do not count."""
        previous_step, count = self._failures.get(uid, ("", 0))
        count = count + 1 if previous_step == step else 1
        self._failures[uid] = (step, count)
        return count

    def clear_failures(self, uid: str) -> None:
        """A pass ended without a failure."""
        self._failures.pop(uid, None)

    def converged(self, uid: str, step: str, digest: str) -> bool:
        """Whether `step` last ended in place on rendered objects with this `digest`."""
        return self._converged.get(uid, {}).get(step) == digest

    def note_step(self, uid: str, step: str, digest: str | None) -> None:
        """`step` ended in place on objects with `digest`; None: it did not (look at it next time)."""
        if digest is None:
            self._converged.get(uid, {}).pop(step, None)
        else:
            self._converged.setdefault(uid, {})[step] = digest

    def seen(self, name: str, uid: str) -> None:
        """Note that `name` is now the tenant with `uid`; an earlier tenant of that name is forgotten."""
        previous = self._uid_of.get(name)
        if previous is not None and previous != uid:
            self.forget(previous)
        self._uid_of[name] = uid

    def status_written(self, uid: str, resource_version: str | None) -> None:
        """The status write of a pass of this process was answered with `resource_version`."""
        if resource_version:
            self._written_version[uid] = resource_version

    def is_last_written(self, body: dict) -> bool:
        """Whether `body` is the very version of the tenant that this process's last status write
        made: nothing changed it since, so its status is the newest there is."""
        metadata = body.get("metadata") or {}
        version = metadata.get("resourceVersion")
        return bool(version) and self._written_version.get(metadata.get("uid") or "") == version

    def ownership_settled(self, uid: str) -> bool:
        """Whether a pass of this process already handed the tenant's merge-patched status fields to
        their writers, or found none to hand: the one-time migration is not looked at again."""
        return uid in self._ownership_settled

    def settle_ownership(self, uid: str) -> None:
        self._ownership_settled.add(uid)

    def access_confirmed(self, uid: str) -> bool:
        """Whether a pass of this process saw the API server apply the operator's RoleBinding in the
        tenant's host namespace (`steps.namespace.wait_until_granted`)."""
        return uid in self._access_confirmed

    def confirm_access(self, uid: str) -> None:
        self._access_confirmed.add(uid)

    def knows(self, name: str, uid: str) -> bool:
        """Whether a pass of this process ran for the tenant `name` with `uid`."""
        return bool(uid) and self._uid_of.get(name) == uid

    def forget(self, uid: str) -> None:
        """Drop everything remembered about the tenant with `uid` (it was deleted)."""
        self._helm_stops.pop(uid, None)
        self._failures.pop(uid, None)
        self._converged.pop(uid, None)
        self._written_version.pop(uid, None)
        self._ownership_settled.discard(uid)
        self._access_confirmed.discard(uid)
        for name in [name for name, known in self._uid_of.items() if known == uid]:
            del self._uid_of[name]

    def __len__(self) -> int:
        return len(self._uid_of)
