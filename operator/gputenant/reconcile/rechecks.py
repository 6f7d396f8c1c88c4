"""The operator's own look-again for tenants that wait for something normal (a control plane
starting, pods stopping): one pending timer per tenant, at most MAX_LOOKS in a row, then the
resync timer and the control-plane pod watch are what remain. A wait is not a failure: it never
goes through kopf's retries (which log an ERROR, write kopf's progress annotations and count the
attempts) and it never grows a backoff."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from gputenant.reconcile.context import Outcome
from gputenant.reconcile.controlplane import PodSignature

log = logging.getLogger(__name__)

MAX_LOOKS = 150
"""Looks in a row for one tenant (150 × 2 s: five minutes of a control plane that does not come)."""


class Rechecks:
    """Reconciles a tenant by name after a delay (`look` reads it and runs its pipeline; None: it is
    gone or being deleted), once per tenant at a time; a newer request replaces an older. `look` is
    expected to call `follow`."""

    def __init__(self, look: Callable[[str], Awaitable[Outcome | None]], max_looks: int = MAX_LOOKS,
                 lock: Callable[[str], asyncio.Lock] | None = None):
        self.look = look
        self.max_looks = max_looks
        self.lock = lock
        """The tenant's pipeline lock, held by every pass (`changed` waits for the pass in flight)."""
        self._pending: dict[str, asyncio.Task] = {}
        self._looks: dict[str, int] = {}
        self._judged_at: dict[str, float] = {}
        self._seen: dict[str, dict[str, PodSignature]] = {}
        self._closed = False

    def follow(self, name: str, wait_after: float | None) -> None:
        """After a pass of tenant `name`: look again in `wait_after` seconds when it waits; when it
        does not, forget the count and any look still pending."""
        if wait_after is None:
            self._looks.pop(name, None)
            self.cancel(name)
            return
        self.schedule(name, wait_after)

    def schedule(self, name: str, delay: float) -> None:
        if self._closed:
            return  # the operator is stopping: a pass that ends now asks for no other
        looks = self._looks.get(name, 0)
        if looks >= self.max_looks:
            if looks == self.max_looks:
                log.info("tenant %s: still waiting after %d looks; the resync timer and the control-plane "
                         "pod watch take over", name, looks)
                self._looks[name] = looks + 1
            return
        self._looks[name] = looks + 1
        self.cancel(name)
        self._pending[name] = asyncio.create_task(self._later(name, delay), name=f"gputenant-recheck-{name}")

    def cancel(self, name: str) -> None:
        task = self._pending.pop(name, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def forget(self, name: str) -> None:
        """The tenant is gone."""
        self._looks.pop(name, None)
        self._judged_at.pop(name, None)
        self._seen.pop(name, None)
        self.cancel(name)

    def judged(self, name: str, outcome: Outcome) -> None:
        """A pass of tenant `name` ended (under its lock): note when it read the control plane and
        the pods it saw."""
        if outcome.control_plane_read_at is not None and \
                outcome.control_plane_read_at >= self._judged_at.get(name, float("-inf")):
            self._judged_at[name] = outcome.control_plane_read_at
            self._seen[name] = dict(outcome.control_plane_pods)

    async def changed(self, name: str, pod: str, signature: PodSignature) -> None:
        """The tenant's control-plane pod `pod` started or stopped serving (the pod watch; its
        `signature` now): reconcile the tenant now, unless the last pass that read the control plane
        read it after this moment, or saw `pod` just so (a pod it did not list was not serving). The
        pass in flight often did either: the pod turns ready while Helm installs, and the watch's
        event can reach the operator after the listing that already had it."""
        changed_at = time.monotonic()
        if self.lock is not None:
            async with self.lock(name):
                pass
        if self._judged_at.get(name, float("-inf")) >= changed_at:
            log.debug("tenant %s: its control-plane change was judged by the pass in flight", name)
            return
        seen = self._seen.get(name)
        if seen is not None and seen.get(pod) == signature:
            log.debug("tenant %s: the last pass saw pod %s as it is now", name, pod)
            return
        await self.now(name)

    async def close(self) -> None:
        """Cancel every look still pending; none is scheduled after this."""
        self._closed = True
        tasks = list(self._pending.values())
        self._pending.clear()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)

    async def now(self, name: str) -> None:
        """Reconcile tenant `name` now, outside kopf (a wait is over, or its control-plane pod
        changed); a failure is looked at again after its backoff."""
        outcome = await self.look(name)
        if outcome is None:
            self.forget(name)
            return
        if outcome.retry_after is not None:
            self.schedule(name, outcome.retry_after)

    async def _later(self, name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._pending.get(name) is asyncio.current_task():
            del self._pending[name]
        try:
            await self.now(name)
        except Exception:  # a look that fails must not end the operator; the next pass retries
            log.exception("tenant %s: looking again failed", name)

    def __len__(self) -> int:
        return len(self._pending)
