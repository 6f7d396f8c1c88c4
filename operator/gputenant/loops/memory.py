"""Give the system back the memory passes no longer use.

Hundreds of tenants applied at once make hundreds of passes allocate at the same time (bodies,
rendered objects, Helm's output); CPython frees those objects when the passes end, but glibc's
malloc keeps the freed pages in its heaps, so the process's RSS stays at the high-water mark for
good. `malloc_trim(0)` hands every free page of every heap back (madvise), so RSS follows what the
operator holds (measured in docs/performance.md, "Memory at 500 to 2,000 tenants"). It runs when the
work queue has finished passes since the last release, at most once per `MIN_INTERVAL_SECONDS`,
also while passes keep running (thousands of tenants resyncing keep the queue busy, and an
onboarding burst lasts minutes): a full garbage collection of thousands of tenants' objects takes
tens of milliseconds. Elsewhere than glibc there is no `malloc_trim` and only the collection runs.

`limit_malloc_arenas` caps glibc's heaps at `MALLOC_ARENAS` before any thread starts (what
``MALLOC_ARENA_MAX`` does): glibc gives threads heaps of their own, up to eight per core, and the
operator's few threads (the resolver's, kopf's executor, the child watchers of Helm's processes)
would each leave a heap of freed but split pages behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CHECK_SECONDS = 2.0
"""How often the loop looks whether passes finished."""
MIN_INTERVAL_SECONDS = 30.0
"""The least time between two releases."""


MALLOC_ARENAS = 2
M_ARENA_MAX = -8
"""glibc's mallopt parameter number for the arena cap (malloc.h)."""


def _libc_function(name: str, argtypes: list) -> Callable[..., int] | None:
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


MALLOC_TRIM = _libc_function("malloc_trim", [ctypes.c_size_t])
MALLOPT = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's heaps at `arenas` (call before threads start); whether glibc took it. Left
    alone when ``MALLOC_ARENA_MAX`` is set: the platform engineer's choice wins."""
    if MALLOPT is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(MALLOPT(M_ARENA_MAX, arenas))


def resident_mib() -> float:
    """This process's resident memory (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def release_free_memory() -> bool:
    """Collect unreachable cycles, then hand malloc's free pages back; whether any were."""
    before = resident_mib()
    gc.collect()
    released = bool(MALLOC_TRIM(0)) if MALLOC_TRIM is not None else False
    log.info("released free memory after passes: RSS %.1f -> %.1f MiB", before, resident_mib())
    return released


async def keep_memory_released(finished: Callable[[], int], check_seconds: float = CHECK_SECONDS,
                               min_interval_seconds: float = MIN_INTERVAL_SECONDS,
                               release: Callable[[], bool] = release_free_memory) -> None:
    """Forever: `release` once passes finished since the last time (`finished` counts them), at
    most once per `min_interval_seconds`."""
    released_after, released_at = finished(), float("-inf")
    while True:
        await asyncio.sleep(check_seconds)
        now_finished = finished()
        if now_finished == released_after or time.monotonic() - released_at < min_interval_seconds:
            continue
        released_after, released_at = now_finished, time.monotonic()
        release()
