"""The reconcile slots: how many pipeline passes run at once, and which waiting pass goes next.

With hundreds of tenants applied at once, most passes wait for a slot while the ones holding them
wait for Helm. A first-come queue then puts the short pass that hands a tenant its kubeconfig once
its control plane serves (a look again) behind every install still to come: measured at 200
tenants, control planes that were ready after 47 s got their kubeconfigs after 82 s. So a waiting
pass is let in by how close it brings a tenant to working, then in arrival order:

- ``FINISH``: a look again at a tenant whose objects exist: waiting for its control plane, or
  retrying a failed step after its backoff (`reconcile.rechecks`, at most ``MAX_LOOKS`` in a row);
- ``CHANGE``: a full pass for a new tenant, a spec change, an annotation or a restart;
- ``DRIFT``: the drift timer's pass, which only reads what the others write.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum


class Urgency(IntEnum):
    """The order waiting passes get a slot in; lower first."""

    FINISH = 0
    CHANGE = 1
    DRIFT = 2


class ReconcileSlots:
    """At most `limit` passes at once (`gputenant run --reconcile-concurrency`); a freed slot goes to
    the most urgent waiting pass, the earliest of those first."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"reconcile slots must be at least 1, not {limit}")
        self.limit = limit
        self.busy = 0
        self._waiting: list[tuple[Urgency, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def slot(self, urgency: Urgency) -> AsyncIterator[None]:
        await self._acquire(urgency)
        try:
            yield
        finally:
            self._release()

    def waiting(self, urgency: Urgency | None = None) -> int:
        """Passes waiting for a slot (of one urgency, or all)."""
        return sum(1 for entry in self._waiting
                   if not entry[2].done() and (urgency is None or entry[0] == urgency))

    async def _acquire(self, urgency: Urgency) -> None:
        if self.busy < self.limit:  # a free slot means nobody waits: a freed slot goes straight to a waiter
            self.busy += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (urgency, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # the slot was handed over just as the waiter was cancelled
            raise

    def _release(self) -> None:
        """Hand the slot straight to the next waiter that is still waiting, or free it."""
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return
        self.busy -= 1
