"""The one work queue of a cell's tenants, in the shape of controller-runtime's: kopf's handlers, the
watches and the passes themselves only add a tenant's name with an urgency; a fixed number of
workers (`gputenant run --reconcile-concurrency`) run the passes.

- **Deduplicated**: a name is queued at most once. Adding it again keeps the more urgent of the two
  and the earlier time; adding it while its pass runs marks it to run once more after that pass
  (which may have read before the change), never twice at once.
- **By urgency, then arrival**: with hundreds of tenants applied at once, a first-come queue put the
  short pass that hands a tenant its kubeconfig once its control plane serves behind every install
  still to come (measured at 200 tenants: control planes ready after 47 s, kubeconfigs after 82 s).
  So a ready name is taken by how close its pass brings a tenant to working:
  ``FINISH`` (a look again at a tenant whose objects exist, waiting for its control plane), then
  ``CHANGE`` (a new tenant, a spec change, an annotation, a restart, a retry after a failure), then
  ``DRIFT`` (the resync's pass, which only repairs what drifted).
- **One requeue**: a pass returns at most one `Requeue` (after a wait, a failure's backoff, or the
  resync period: the resync is a timed requeue, as controller-runtime's ``RequeueAfter``, not a
  timer task per tenant). A pass that fails unexpectedly is queued again after `failed_again`.
- **Exclusive**: deletion takes a name out of the queue and waits for its pass in flight
  (`exclusive`), so offboarding never runs beside a pass of the same tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

log = logging.getLogger(__name__)


class Urgency(IntEnum):
    """The order ready names are taken in; lower first."""

    FINISH = 0
    CHANGE = 1
    DRIFT = 2


@dataclass(frozen=True)
class Requeue:
    """What a pass asks for: its tenant again after `after` seconds, at `urgency`."""

    after: float
    urgency: Urgency


@dataclass(frozen=True)
class _Entry:
    urgency: Urgency
    ready_at: float
    sequence: int


Process = Callable[[str, Urgency], Coroutine[Any, Any, Requeue | None]]


class TenantQueue:
    """Names waiting for a pass, and `workers` tasks running `process(name, urgency)` for them."""

    def __init__(self, process: Process, workers: int, failed_again: Requeue | None = None):
        if workers < 1:
            raise ValueError(f"reconcile workers must be at least 1, not {workers}")
        self.process = process
        self.workers = workers
        self.failed_again = failed_again
        self._entries: dict[str, _Entry] = {}
        self._ready: list[tuple[Urgency, int, str]] = []
        self._delayed: list[tuple[float, int, str]] = []
        self._sequence = itertools.count()
        self._in_flight: dict[str, asyncio.Task[Requeue | None]] = {}
        self._again: dict[str, tuple[Urgency, float]] = {}
        self._held: dict[str, int] = {}
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self.finished = 0
        """Passes finished so far (`loops.memory` releases memory once passes finished)."""

    # -- adding ---------------------------------------------------------------------------------

    def add(self, name: str, urgency: Urgency, after: float = 0.0) -> None:
        """Queue a pass of `name` at `urgency` in `after` seconds (see the module's rules)."""
        if self._closed or name in self._held:
            return
        ready_at = self._now() + max(after, 0.0)
        if name in self._in_flight:
            previous = self._again.get(name)
            if previous is not None:
                urgency, ready_at = min(urgency, previous[0]), min(ready_at, previous[1])
            self._again[name] = (urgency, ready_at)
            return
        current = self._entries.get(name)
        if current is not None:
            if current.urgency <= urgency and current.ready_at <= ready_at:
                return
            urgency, ready_at = min(urgency, current.urgency), min(ready_at, current.ready_at)
        entry = _Entry(urgency, ready_at, next(self._sequence))
        self._entries[name] = entry
        if ready_at <= self._now():
            heapq.heappush(self._ready, (urgency, entry.sequence, name))
        else:
            heapq.heappush(self._delayed, (ready_at, entry.sequence, name))
        self._notify()

    def forget(self, name: str) -> None:
        """Drop `name`'s queued pass and its pass-again mark (its tenant is gone)."""
        self._entries.pop(name, None)
        self._again.pop(name, None)

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """No pass of `name` runs or starts while the block runs; its queued pass is dropped."""
        self._held[name] = self._held.get(name, 0) + 1
        self.forget(name)
        try:
            await self.idle(name)
            yield
        finally:
            left = self._held.pop(name) - 1
            if left:
                self._held[name] = left

    async def idle(self, name: str) -> None:
        """Until the pass of `name` in flight, if any, has ended."""
        running = self._in_flight.get(name)
        if running is not None:
            await asyncio.wait([running])

    # -- what is queued -------------------------------------------------------------------------

    def waiting(self, urgency: Urgency | None = None) -> int:
        """Names queued (at one urgency, or all)."""
        return sum(1 for entry in self._entries.values() if urgency is None or entry.urgency == urgency)

    def queued(self, name: str) -> Urgency | None:
        entry = self._entries.get(name)
        return entry.urgency if entry else None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def running(self, name: str) -> bool:
        return name in self._in_flight

    # -- the workers ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers on the running event loop."""
        self._wake = asyncio.Event()
        self._tasks = [asyncio.create_task(self._work(), name=f"gputenant-worker-{i}") for i in range(self.workers)]

    async def close(self) -> None:
        """Take nothing more, and cancel every pass in flight (before the cell closes its client: a
        pass whose requests the closing client aborts would write them into the tenant's status as
        the API server failing). The next process runs each tenant's pipeline once (on.resume)."""
        self._closed = True
        self._entries.clear()
        self._again.clear()
        tasks = [*self._tasks, *self._in_flight.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _work(self) -> None:
        while not self._closed:
            taken = self._take()
            if taken is None:
                await self._sleep()
                continue
            name, urgency = taken
            task: asyncio.Task[Requeue | None] = asyncio.create_task(self.process(name, urgency),
                                                                 name=f"gputenant-pass-{name}")
            self._in_flight[name] = task
            requeue = None
            try:
                requeue = await asyncio.shield(task)
            except asyncio.CancelledError:
                task.cancel()
                raise
            except Exception:  # a pass that fails unexpectedly must not end the operator
                log.exception("tenant %s: the pass failed; the next event or resync runs it again", name)
                requeue = self.failed_again
            finally:
                self._in_flight.pop(name, None)
                self.finished += 1
            self._after_pass(name, requeue)

    def _after_pass(self, name: str, requeue: Requeue | None) -> None:
        again = self._again.pop(name, None)
        if again is not None:
            self.add(name, again[0], again[1] - self._now())
        if requeue is not None:
            self.add(name, requeue.urgency, requeue.after)

    def _take(self) -> tuple[str, Urgency] | None:
        """The most urgent ready name, the earliest of those; None when none is ready."""
        now = self._now()
        while self._delayed and self._delayed[0][0] <= now:
            _, sequence, name = heapq.heappop(self._delayed)
            entry = self._entries.get(name)
            if entry is not None and entry.sequence == sequence:
                heapq.heappush(self._ready, (entry.urgency, sequence, name))
        while self._ready:
            _, sequence, name = heapq.heappop(self._ready)
            entry = self._entries.get(name)
            if entry is None or entry.sequence != sequence:
                continue
            del self._entries[name]
            return name, entry.urgency
        return None

    async def _sleep(self) -> None:
        """Until a name is added, or the earliest delayed one is due."""
        assert self._wake is not None, "start() runs the workers"
        self._wake.clear()
        if self._ready or (self._delayed and self._delayed[0][0] <= self._now()):
            return  # added between this worker's look and the clear: look again
        timeout = None
        while self._delayed:
            ready_at, sequence, name = self._delayed[0]
            entry = self._entries.get(name)
            if entry is not None and entry.sequence == sequence:
                timeout = max(ready_at - self._now(), 0.0)
                break
            heapq.heappop(self._delayed)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @staticmethod
    def _now() -> float:
        return time.monotonic()
