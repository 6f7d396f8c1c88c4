"""The release of free memory passes no longer use (gputenant.loops.memory): once passes finished,
no oftener than its interval, also while more run; malloc_trim is reached on glibc; the arena cap;
kept objects packed as compact JSON (gputenant.kube.packed)."""

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


def test_a_packed_object_reads_back_equal_each_read_a_copy_of_its_own_and_smaller_than_decoded():
    import json
    import sys

    from gputenant.kube.packed import pack, unpack

    def decoded_size(value: object) -> int:
        if isinstance(value, dict):
            return sys.getsizeof(value) + sum(decoded_size(k) + decoded_size(v) for k, v in value.items())
        if isinstance(value, list):
            return sys.getsizeof(value) + sum(decoded_size(item) for item in value)
        return sys.getsizeof(value)

    tenant = json.loads(json.dumps({"metadata": {"name": "team-ä", "generation": 3}, "spec": {"gpu": {"quota": 1.5}},
                                    "status": {"conditions": [{"type": f"Step{i}Ready", "status": "True",
                                                               "message": "applied", "observedGeneration": 3}
                                                              for i in range(10)]}}))
    packed = pack(tenant)
    first, second = unpack(packed), unpack(packed)
    assert first == tenant and second == tenant
    assert isinstance(first["spec"]["gpu"]["quota"], float) and isinstance(first["metadata"]["generation"], int)
    first["status"]["conditions"].clear()
    assert second["status"]["conditions"] and unpack(packed) == tenant
    assert sys.getsizeof(packed) * 2 < decoded_size(tenant)