"""How a Cell runs a tenant's passes. The drift timer's pass is left out while a full pass
waits to start, or when one began while it waited for its slot (that pass read everything after the
timer fired), and runs after a full pass already running (which may have read before the drift). A
look again takes the next free slot before full passes and drift checks, and no drift check waiting
for a slot holds the tenant's lock against it. A look again starts from the operator's tenant index
only at the version its last status write made."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from gputenant.cell import Cell
from gputenant.config.models import OperatorConfig
from gputenant.reconcile.context import Outcome
from gputenant.reconcile.pipeline import Reconciler
from gputenant.reconcile_slots import ReconcileSlots

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))


class HeldPasses:
    """Stands in for the Reconciler: records each pass and holds it until `release`."""

    def __init__(self) -> None:
        self.passes: list[str] = []
        self.release = asyncio.Event()

    async def current(self, name: str) -> dict:
        """The tenant as the API would answer it (a look again starts from it)."""
        return tenant(name)

    async def reconcile(self, body: dict, *, recheck: bool = False) -> Outcome:
        self.passes.append(("look again " if recheck else "") + body["metadata"]["name"])
        await self.release.wait()
        return Outcome()


def cell(passes: HeldPasses, slots: int = 8) -> Cell:
    return Cell(config=CONFIG, client=None, reconciler=passes,  # type: ignore[arg-type]
                resync_seconds=60, deletion_retry_seconds=10, reconcile_slots=ReconcileSlots(slots))


def tenant(name: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_drift_check_is_left_to_a_full_pass_waiting_for_a_slot():
    async def scenario() -> tuple[list[str], dict[str, int]]:
        passes = HeldPasses()
        rt = cell(passes, slots=1)
        running = asyncio.create_task(rt.reconcile(tenant("team-a")))
        waiting = asyncio.create_task(rt.reconcile(tenant("team-b")))
        await settle()
        check = asyncio.create_task(rt.drift_check(tenant("team-b")))
        await settle()
        assert check.done()  # at once: team-b's pass has not started and will read after it
        passes.release.set()
        await asyncio.gather(running, waiting, check)
        return passes.passes, rt.full_passes_waiting
    assert asyncio.run(scenario()) == (["team-a", "team-b"], {})


def test_a_drift_check_runs_after_a_full_pass_already_running():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = cell(passes)
        running = asyncio.create_task(rt.reconcile(tenant("team-a")))
        await settle()
        check = asyncio.create_task(rt.drift_check(tenant("team-a")))
        await settle()
        passes.release.set()
        await asyncio.gather(running, check)
        return passes.passes
    assert asyncio.run(scenario()) == ["team-a", "team-a"]


def test_a_full_pass_cancelled_while_waiting_no_longer_counts_as_waiting():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = cell(passes, slots=1)
        running = asyncio.create_task(rt.reconcile(tenant("team-a")))
        waiting = asyncio.create_task(rt.reconcile(tenant("team-b")))
        await settle()
        waiting.cancel()
        await settle()
        assert rt.full_passes_waiting == {}
        passes.release.set()
        await asyncio.gather(running, rt.drift_check(tenant("team-b")))
        return passes.passes
    assert asyncio.run(scenario()) == ["team-a", "team-b"]


def passes_in_order(*asked: Callable[[Cell], Awaitable[object]]) -> list[str]:
    """The passes run when team-a's full pass holds the one reconcile slot and each of `asked` is
    started in turn; a pass order that deadlocks fails after 5 s instead of hanging."""
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = cell(passes, slots=1)
        tasks = [asyncio.create_task(rt.reconcile(tenant("team-a")))]
        await settle()
        for ask in asked:
            tasks.append(asyncio.create_task(ask(rt)))
            await settle()
        passes.release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
        return passes.passes
    return asyncio.run(scenario())


def test_a_look_again_takes_the_next_slot_before_full_passes_and_drift_checks_asked_earlier():
    assert passes_in_order(lambda rt: rt.drift_check(tenant("team-b")), lambda rt: rt.reconcile(tenant("team-c")),
                           lambda rt: rt.look_again("team-d")) == ["team-a", "look again team-d", "team-c", "team-b"]


def test_a_drift_check_waiting_for_a_slot_does_not_hold_the_tenants_lock_against_its_look_again():
    assert passes_in_order(lambda rt: rt.drift_check(tenant("team-b")),
                           lambda rt: rt.look_again("team-b")) == ["team-a", "look again team-b", "team-b"]


def test_a_drift_check_is_left_out_when_a_full_pass_began_while_it_waited_for_its_slot():
    assert passes_in_order(lambda rt: rt.drift_check(tenant("team-b")),
                           lambda rt: rt.reconcile(tenant("team-b"))) == ["team-a", "team-b"]


def test_stopping_cancels_the_passes_running_and_waiting_before_they_write_anything():
    async def scenario() -> tuple[list[str], list[bool], dict, int]:
        passes = HeldPasses()
        rt = cell(passes, slots=1)
        judged: list[str] = []
        rt.rechecks.judged = lambda name, outcome: judged.append(name)  # type: ignore[method-assign]
        tasks = [asyncio.create_task(rt.reconcile(tenant("team-a"))),
                 asyncio.create_task(rt.look_again("team-b")),
                 asyncio.create_task(rt.drift_check(tenant("team-c")))]
        await settle()
        await rt.stop_passes()
        passes.release.set()
        await settle()
        assert judged == []
        for late in (rt.reconcile(tenant("team-d")), rt.look_again("team-e")):  # nothing starts any more
            with pytest.raises(asyncio.CancelledError):
                await late
        rt.rechecks.follow("team-f", 0.0)  # a pass ending as the operator stops asks for no other
        left = len(rt.passes) + len(rt.rechecks)
        return passes.passes, [task.cancelled() for task in tasks], rt.full_passes_waiting, left
    assert asyncio.run(scenario()) == (["team-a"], [True, True, True], {}, 0)


class Looked:
    """Stands in for the API client: the tenant body it answers a GET with, and how often it was asked."""

    def __init__(self, body: dict) -> None:
        self.body, self.gets = body, 0

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        self.gets += 1
        return self.body


def test_a_look_again_starts_from_the_index_only_at_the_version_its_last_status_write_made():
    """`Reconciler.current`, which a look again and `with_current_status` read the tenant with."""
    written = {"metadata": {"name": "team-a", "uid": "uid-team-a", "resourceVersion": "41"}, "status": {"x": 1}}
    changed = {"metadata": {"name": "team-a", "uid": "uid-team-a", "resourceVersion": "42"}, "status": {"x": 1}}
    client = Looked(changed)
    reconciler = Reconciler(client, CONFIG, None, None)  # type: ignore[arg-type]
    reconciler.services.cache.hand_over({"tenants": {"team-a": [written]}})
    assert asyncio.run(reconciler.current("team-a")) is changed and client.gets == 1  # no write of ours yet: read
    reconciler.memory.status_written("uid-team-a", "41")
    assert asyncio.run(reconciler.current("team-a")) is written and client.gets == 1
    reconciler.services.cache.tenants = {"team-a": [changed]}  # someone wrote the tenant since
    assert asyncio.run(reconciler.current("team-a")) is changed and client.gets == 2
    assert reconciler.memory.is_last_written(written) and not reconciler.memory.is_last_written(changed)
    reconciler.forget("uid-team-a")
    assert not reconciler.memory.is_last_written(written)
