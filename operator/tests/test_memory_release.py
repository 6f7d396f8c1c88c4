"""The release of free memory after a burst of passes (gputenant.loops.memory): once per burst,
only while the queue is idle, no oftener than its interval; and malloc_trim is reached on glibc."""

from __future__ import annotations

import asyncio

from gputenant.loops import memory
from gputenant.loops.memory import QueueActivity, keep_memory_released, release_free_memory
from gputenant.work_queue import Requeue, TenantQueue, Urgency


def test_memory_is_released_once_per_burst_only_while_the_queue_is_idle():
    async def scenario() -> list[int]:
        state = {"finished": 0, "busy": False}
        releases: list[int] = []
        loop = asyncio.create_task(keep_memory_released(
            QueueActivity(lambda: state["finished"], lambda: state["busy"]), check_seconds=0.01,
            min_interval_seconds=0, release=lambda: releases.append(state["finished"]) is None))
        await asyncio.sleep(0.05)                      # nothing finished: nothing released
        state.update(finished=40, busy=True)
        await asyncio.sleep(0.05)                      # a burst still running: nothing released
        state["busy"] = False
        await asyncio.sleep(0.05)                      # the burst ended: released once
        state["finished"] = 41
        await asyncio.sleep(0.05)                      # one more pass: released once more
        loop.cancel()
        return releases
    assert asyncio.run(scenario()) == [40, 41]


def test_releases_are_at_least_the_interval_apart():
    async def scenario() -> int:
        state = {"finished": 0}
        releases: list[int] = []
        loop = asyncio.create_task(keep_memory_released(
            QueueActivity(lambda: state["finished"], lambda: False), check_seconds=0.01,
            min_interval_seconds=60, release=lambda: releases.append(1) is None))
        for _ in range(5):
            state["finished"] += 1
            await asyncio.sleep(0.03)
        loop.cancel()
        return len(releases)
    assert asyncio.run(scenario()) == 1


def test_malloc_trim_is_found_and_called_on_glibc():
    assert memory.MALLOC_TRIM is not None, "the operator's image and this machine run glibc"
    assert release_free_memory() in (True, False)


def test_the_queue_counts_finished_passes_and_is_busy_only_with_a_pass_in_flight_or_ready():
    async def scenario() -> list[tuple[int, bool]]:
        release = asyncio.Event()

        async def process(name: str, urgency: Urgency) -> Requeue | None:
            await release.wait()
            return Requeue(3600, Urgency.DRIFT)

        queue = TenantQueue(process, workers=1)
        seen = [(queue.finished, queue.busy())]
        queue.add("team-a", Urgency.CHANGE)
        seen.append((queue.finished, queue.busy()))    # ready, not started
        queue.start()
        await asyncio.sleep(0.01)
        seen.append((queue.finished, queue.busy()))    # in flight
        release.set()
        await asyncio.sleep(0.01)
        seen.append((queue.finished, queue.busy()))    # done; its resync an hour away is not work now
        await queue.close()
        return seen
    assert asyncio.run(scenario()) == [(0, False), (0, True), (0, True), (1, False)]


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
