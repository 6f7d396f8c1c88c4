"""The reconcile slots: at most `limit` passes at once; a freed slot goes to the most urgent waiter,
the earliest of those first; a waiter cancelled before its turn takes no slot."""

from __future__ import annotations

import asyncio

import pytest

from gputenant.reconcile_slots import ReconcileSlots, Urgency


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def hold(slots: ReconcileSlots, urgency: Urgency, name: str, order: list[str], release: asyncio.Event) -> None:
    async with slots.slot(urgency):
        order.append(name)
        await release.wait()


def test_a_freed_slot_goes_to_the_most_urgent_waiter_then_the_earliest():
    async def scenario() -> list[str]:
        slots, order, release = ReconcileSlots(1), [], asyncio.Event()
        tasks = [asyncio.create_task(hold(slots, urgency, name, order, release)) for urgency, name in [
            (Urgency.CHANGE, "first change"), (Urgency.DRIFT, "drift"), (Urgency.CHANGE, "second change"),
            (Urgency.FINISH, "first look"), (Urgency.FINISH, "second look")]]
        await settle()
        assert slots.waiting() == 4 and slots.waiting(Urgency.FINISH) == 2
        release.set()
        await asyncio.gather(*tasks)
        assert slots.busy == 0 and slots.waiting() == 0
        return order
    assert asyncio.run(scenario()) == ["first change", "first look", "second look", "second change", "drift"]


def test_no_more_than_the_limit_hold_a_slot_at_once():
    async def scenario() -> int:
        slots, most, now = ReconcileSlots(3), 0, 0

        async def one() -> None:
            nonlocal most, now
            async with slots.slot(Urgency.CHANGE):
                now += 1
                most = max(most, now)
                await asyncio.sleep(0.001)
                now -= 1
        await asyncio.gather(*(one() for _ in range(20)))
        assert slots.busy == 0
        return most
    assert asyncio.run(scenario()) == 3


def test_a_waiter_cancelled_before_its_turn_takes_no_slot():
    async def scenario() -> list[str]:
        slots, order, release = ReconcileSlots(1), [], asyncio.Event()
        running = asyncio.create_task(hold(slots, Urgency.CHANGE, "running", order, release))
        await settle()
        cancelled = asyncio.create_task(hold(slots, Urgency.FINISH, "cancelled", order, release))
        after = asyncio.create_task(hold(slots, Urgency.DRIFT, "after", order, release))
        await settle()
        cancelled.cancel()
        await settle()
        assert slots.waiting() == 1
        release.set()
        await asyncio.wait_for(asyncio.gather(running, after), timeout=5)
        assert slots.busy == 0
        return order
    assert asyncio.run(scenario()) == ["running", "after"]


def test_a_waiter_cancelled_just_as_the_slot_was_handed_to_it_passes_the_slot_on():
    async def scenario() -> list[str]:
        slots, order, release = ReconcileSlots(1), [], asyncio.Event()
        first = asyncio.create_task(hold(slots, Urgency.CHANGE, "first", order, release))
        await settle()
        handed = asyncio.create_task(hold(slots, Urgency.CHANGE, "handed", order, asyncio.Event()))
        after = asyncio.create_task(hold(slots, Urgency.CHANGE, "after", order, release))
        await settle()
        release.set()
        await asyncio.sleep(0)  # `first` leaves and hands its slot to `handed`, which has not run yet
        handed.cancel()
        await asyncio.wait_for(asyncio.gather(first, after), timeout=5)
        assert slots.busy == 0
        return order
    assert asyncio.run(scenario()) == ["first", "after"]


def test_there_is_at_least_one_slot():
    with pytest.raises(ValueError, match="at least 1"):
        ReconcileSlots(0)
