"""The release of free memory passes no longer use (gputenant.loops.memory): once passes finished,
no oftener than its interval, also while more run; malloc_trim is reached on glibc; the arena cap;
interned copies of kept objects."""

from __future__ import annotations

import asyncio

from gputenant.loops import memory
from gputenant.loops.memory import keep_memory_released, release_free_memory
from gputenant.work_queue import Requeue, TenantQueue, Urgency


def test_memory_is_released_once_passes_finished_also_while_more_run():
    async def scenario() -> list[int]:
        state = {"finished": 0}
        releases: list[int] = []
        loop = asyncio.create_task(keep_memory_released(
            lambda: state["finished"], check_seconds=0.01, min_interval_seconds=0,
            release=lambda: releases.append(state["finished"]) is None))
        await asyncio.sleep(0.05)                      # nothing finished: nothing released
        state["finished"] = 40
        await asyncio.sleep(0.05)                      # forty finished: released once
        state["finished"] = 41
        await asyncio.sleep(0.05)                      # one more: released once more
        loop.cancel()
        return releases
    assert asyncio.run(scenario()) == [40, 41]


def test_releases_are_at_least_the_interval_apart():
    async def scenario() -> int:
        state = {"finished": 0}
        releases: list[int] = []
        loop = asyncio.create_task(keep_memory_released(
            lambda: state["finished"], check_seconds=0.01, min_interval_seconds=60,
            release=lambda: releases.append(1) is None))
        for _ in range(5):
            state["finished"] += 1
            await asyncio.sleep(0.03)
        loop.cancel()
        return len(releases)
    assert asyncio.run(scenario()) == 1


def test_malloc_trim_is_found_on_glibc_and_a_release_logs_rss(caplog):
    assert memory.MALLOC_TRIM is not None, "the operator's image and this machine run glibc"
    with caplog.at_level("INFO", logger=memory.__name__):
        release_free_memory()
    assert "released free memory after passes: RSS" in caplog.text and memory.resident_mib() > 0


def test_the_queue_counts_finished_passes_failed_ones_too():
    async def scenario() -> int:
        async def process(name: str, urgency: Urgency) -> Requeue | None:
            if name == "broken":
                raise RuntimeError("a bug")
            return None

        queue = TenantQueue(process, workers=1)
        queue.start()
        queue.add("team-a", Urgency.CHANGE)
        queue.add("broken", Urgency.CHANGE)
        await asyncio.sleep(0.05)
        await queue.close()
        return queue.finished
    assert asyncio.run(scenario()) == 2


def test_the_arena_cap_leaves_a_platform_engineers_malloc_arena_max_alone(monkeypatch):
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(memory, "MALLOPT", lambda parameter, value: calls.append((parameter, value)) or 1)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not memory.limit_malloc_arenas()
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert memory.limit_malloc_arenas()
    assert calls == [(memory.M_ARENA_MAX, memory.MALLOC_ARENAS)]


def test_an_interned_copy_is_equal_independent_and_shares_its_keys():
    from gputenant.kube.interning import interned_copy

    def decoded(name: str) -> dict:
        import json
        return json.loads(json.dumps({"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "message": "m" * 100}]}, "spec": {"gpu": {"quota": 1.5}}}))

    first, second = decoded("team-a"), decoded("team-b")
    assert next(iter(first)) is not next(iter(second))  # json decodes each body's keys anew
    copies = interned_copy(first), interned_copy(second)
    assert copies[0] == first and copies[0] is not first and copies[0]["status"] is not first["status"]
    assert next(iter(copies[0])) is next(iter(copies[1]))
    assert next(iter(copies[0]["status"]["conditions"][0])) is next(iter(copies[1]["status"]["conditions"][0]))
    copies[0]["status"]["conditions"].clear()
    assert first["status"]["conditions"]
