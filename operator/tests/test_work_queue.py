"""The tenants' work queue (gputenant.work_queue): deduplicated names, taken by urgency then
arrival, never two passes of one name at once (an add while it runs runs it once more after), one
requeue per pass (a pass that raises: `failed_again`), deletion exclusive, and closing cancels what
runs."""

from __future__ import annotations

import asyncio

import pytest

from gputenant.work_queue import Requeue, TenantQueue, Urgency

FINISH, CHANGE, DRIFT = Urgency.FINISH, Urgency.CHANGE, Urgency.DRIFT


class Passes:
    """The process the queue runs: records (name, urgency) and holds each pass until `release`;
    `requeues` answers a pass of a name with a Requeue, once."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Urgency]] = []
        self.release = asyncio.Event()
        self.requeues: dict[str, Requeue] = {}
        self.started = asyncio.Event()

    async def __call__(self, name: str, urgency: Urgency) -> Requeue | None:
        self.ran.append((name, urgency))
        self.started.set()
        await self.release.wait()
        return self.requeues.pop(name, None)


async def settle(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def run(scenario) -> object:
    return asyncio.run(asyncio.wait_for(scenario(), timeout=5))


def test_a_name_is_queued_once_at_its_most_urgent():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=1)
        for urgency in (DRIFT, CHANGE, DRIFT):
            queue.add("team-a", urgency)
        assert queue.waiting() == 1 and queue.queued("team-a") is CHANGE
        passes.release.set()
        queue.start()
        await settle()
        await queue.close()
        return passes.ran
    assert run(scenario) == [("team-a", CHANGE)]


def test_ready_names_are_taken_by_urgency_then_arrival():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=1)
        queue.add("drift-1", DRIFT)
        queue.add("change-1", CHANGE)
        queue.add("drift-2", DRIFT)
        queue.add("finish-1", FINISH)
        queue.add("change-2", CHANGE)
        passes.release.set()
        queue.start()
        await settle(30)
        await queue.close()
        return [name for name, _ in passes.ran]
    assert run(scenario) == ["finish-1", "change-1", "change-2", "drift-1", "drift-2"]


def test_an_add_while_its_pass_runs_runs_it_once_more_after_never_beside_it():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=4)
        queue.start()
        queue.add("team-a", CHANGE)
        await passes.started.wait()
        for urgency in (DRIFT, FINISH, DRIFT):
            queue.add("team-a", urgency)
        await settle()
        assert passes.ran == [("team-a", CHANGE)] and queue.running("team-a") and queue.waiting() == 0
        passes.release.set()
        await settle(30)
        await queue.close()
        return passes.ran
    assert run(scenario) == [("team-a", CHANGE), ("team-a", FINISH)]


def test_a_pass_asks_for_one_requeue_after_its_delay():
    async def scenario():
        passes = Passes()
        passes.requeues["team-a"] = Requeue(0.05, FINISH)
        passes.release.set()
        queue = TenantQueue(passes, workers=2)
        queue.start()
        queue.add("team-a", CHANGE)
        await settle()
        assert passes.ran == [("team-a", CHANGE)] and queue.queued("team-a") is FINISH
        await asyncio.sleep(0.2)
        await queue.close()
        return passes.ran
    assert run(scenario) == [("team-a", CHANGE), ("team-a", FINISH)]


def test_an_earlier_add_replaces_a_delayed_requeue():
    async def scenario():
        passes = Passes()
        passes.release.set()
        queue = TenantQueue(passes, workers=1)
        queue.add("team-a", FINISH, after=60)
        queue.add("team-a", DRIFT)
        queue.start()
        await settle()
        await queue.close()
        return passes.ran
    assert run(scenario) == [("team-a", FINISH)]


def test_no_more_passes_than_workers_at_once():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=2)
        queue.start()
        for name in ("a", "b", "c", "d"):
            queue.add(name, CHANGE)
        await settle()
        in_flight, waiting = queue.in_flight, queue.waiting()
        passes.release.set()
        await settle(30)
        await queue.close()
        return in_flight, waiting, len(passes.ran)
    assert run(scenario) == (2, 2, 4)


def test_exclusive_waits_for_the_pass_in_flight_drops_the_queued_one_and_refuses_adds():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=2)
        queue.start()
        queue.add("team-a", CHANGE)
        await passes.started.wait()
        queue.add("team-a", DRIFT)
        entered = asyncio.Event()

        async def delete() -> None:
            async with queue.exclusive("team-a"):
                entered.set()
                queue.add("team-a", CHANGE)
                await settle()
                assert not queue.running("team-a") and queue.waiting() == 0

        deleting = asyncio.create_task(delete())
        await settle()
        assert not entered.is_set()  # the pass in flight ends first
        passes.release.set()
        await deleting
        await queue.close()
        return passes.ran
    assert run(scenario) == [("team-a", CHANGE)]


def test_closing_cancels_the_passes_in_flight_and_takes_nothing_more():
    async def scenario():
        passes = Passes()
        queue = TenantQueue(passes, workers=1)
        queue.start()
        queue.add("team-a", CHANGE)
        queue.add("team-b", CHANGE)
        await passes.started.wait()
        await queue.close()
        queue.add("team-c", FINISH)
        passes.release.set()
        await settle()
        return passes.ran, queue.waiting(), queue.in_flight
    assert run(scenario) == ([("team-a", CHANGE)], 0, 0)


def test_a_pass_that_raises_leaves_the_queue_working():
    async def scenario():
        ran: list[str] = []

        async def process(name: str, urgency: Urgency) -> Requeue | None:
            ran.append(name)
            if name == "broken":
                raise RuntimeError("a bug")
            return None

        queue = TenantQueue(process, workers=1)
        queue.start()
        queue.add("broken", CHANGE)
        queue.add("team-a", CHANGE)
        await settle(30)
        await queue.close()
        return ran
    assert run(scenario) == ["broken", "team-a"]


def test_a_pass_that_raises_is_queued_again_after_failed_again():
    async def scenario():
        ran: list[tuple[str, Urgency]] = []

        async def process(name: str, urgency: Urgency) -> Requeue | None:
            ran.append((name, urgency))
            if len(ran) == 1:
                raise RuntimeError("a bug")
            return None

        queue = TenantQueue(process, workers=1, failed_again=Requeue(0.05, DRIFT))
        queue.start()
        queue.add("broken", CHANGE)
        await settle(30)
        assert queue.queued("broken") is DRIFT
        await asyncio.sleep(0.2)
        await queue.close()
        return ran
    assert run(scenario) == [("broken", CHANGE), ("broken", DRIFT)]


def test_workers_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        TenantQueue(Passes(), workers=0)
