"""How a Cell runs a tenant's passes from its work queue: each pass reads the tenant once, a FINISH
pass is a look again, a wait is looked at again and a failure retried as a full pass after its
backoff, every other pass asks for the tenant's next resync (a period after its last, however many
passes ran between), a control-plane change is looked at only when no pass judged it, deletion
waits for the pass in flight, and stopping cancels what runs. A pass starts from the operator's tenant index
until a pass of this process ran, then only at the version its last status write made."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml

from gputenant.cell import Cell
from gputenant.config.models import OperatorConfig
from gputenant.kube.packed import pack
from gputenant.reconcile.context import Outcome, Pass, Services
from gputenant.reconcile.memory import TenantMemory
from gputenant.reconcile.pipeline import Reconciler
from gputenant.work_queue import Requeue, Urgency

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))


class HeldPasses:
    """Stands in for the Reconciler: records each pass and holds it until `release`; answers with
    `outcomes` (one per pass, then an empty Outcome)."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.passes: list[str] = []
        self.release = asyncio.Event()
        self.outcomes = list(outcomes)
        self.gone: set[str] = set()
        self.services = Services(client=None, config=CONFIG, releases=None, issuer=None,  # type: ignore[arg-type]
                                 memory=TenantMemory())

    async def current(self, name: str) -> dict | None:
        return None if name in self.gone else tenant(name)

    async def reconcile(self, body: dict, *, recheck: bool = False, current: bool = False) -> Outcome:
        assert current, "the queue's pass hands over the body it read"
        self.passes.append(("look again " if recheck else "") + body["metadata"]["name"])
        await self.release.wait()
        return self.outcomes.pop(0) if self.outcomes else Outcome()


def cell(passes: HeldPasses, workers: int = 8, resync_seconds: float = 60) -> Cell:
    return Cell(config=CONFIG, client=None, reconciler=passes,  # type: ignore[arg-type]
                resync_seconds=resync_seconds, deletion_retry_seconds=10, reconcile_workers=workers)


def rounded(requeue: Requeue | None) -> Requeue | None:
    """A requeue with its delay to a tenth of a second (the resync's is measured from the clock)."""
    return None if requeue is None else Requeue(round(requeue.after, 1), requeue.urgency)


def tenant(name: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def test_a_finish_pass_is_a_look_again_a_change_a_full_pass_and_a_resync_a_look_again_while_watching():
    async def scenario(watch_owned: bool) -> list[str]:
        passes = HeldPasses()
        passes.release.set()
        rt = cell(passes)
        rt.watch_owned = watch_owned
        for name, urgency in (("team-a", Urgency.FINISH), ("team-b", Urgency.CHANGE), ("team-c", Urgency.DRIFT)):
            await rt.run_pass(name, urgency)
        return passes.passes
    assert asyncio.run(scenario(True)) == ["look again team-a", "team-b", "look again team-c"]
    assert asyncio.run(scenario(False)) == ["look again team-a", "team-b", "team-c"]


def test_a_wait_is_looked_at_again_and_a_failure_retried_as_a_full_pass():
    async def scenario() -> list[Requeue | None]:
        passes = HeldPasses(Outcome(wait_after=2.0), Outcome(retry_after=8.0), Outcome())
        passes.release.set()
        rt = cell(passes)
        return [rounded(await rt.run_pass("team-a", Urgency.CHANGE)) for _ in range(3)]
    assert asyncio.run(scenario()) == [Requeue(2.0, Urgency.FINISH), Requeue(8.0, Urgency.CHANGE),
                                       Requeue(60.0, Urgency.DRIFT)]


def test_something_falling_due_is_a_pass_then_after_a_retry_and_a_look_again_first():
    """A token to rotate in an hour is a drift pass in an hour, however rare the resync; a failure's
    retry and a look again come first (the pass they run finds the due time again)."""
    async def scenario() -> list[Requeue | None]:
        passes = HeldPasses(Outcome(due_after=3600.0), Outcome(retry_after=8.0, due_after=3600.0),
                            Outcome(wait_after=2.0, due_after=3600.0))
        passes.release.set()
        rt = cell(passes, resync_seconds=36000)
        return [rounded(await rt.run_pass("team-a", Urgency.CHANGE)) for _ in range(3)]
    assert asyncio.run(scenario()) == [Requeue(3600.0, Urgency.DRIFT), Requeue(8.0, Urgency.CHANGE),
                                       Requeue(2.0, Urgency.FINISH)]


def test_the_resync_is_due_a_period_after_the_last_resync_not_after_the_last_pass(monkeypatch):
    """controller-runtime's resync as a timed requeue: the first pass starts the period, passes of
    other urgencies (changes, looks again) leave it where it is, a resync pass starts the next one,
    and something due sooner comes first. Forgotten with the tenant."""
    clock = [1000.0]
    monkeypatch.setattr("gputenant.cell.time.monotonic", lambda: clock[0])

    async def scenario() -> list[Requeue | None]:
        passes = HeldPasses(Outcome(), Outcome(), Outcome(wait_after=2.0), Outcome(), Outcome(due_after=5.0),
                            Outcome())
        passes.release.set()
        rt = cell(passes, resync_seconds=600)
        answers = [await rt.run_pass("team-a", Urgency.CHANGE)]
        clock[0] += 100
        answers.append(await rt.run_pass("team-a", Urgency.CHANGE))
        clock[0] += 100
        answers.append(await rt.run_pass("team-a", Urgency.FINISH))
        clock[0] += 400
        answers.append(await rt.run_pass("team-a", Urgency.DRIFT))
        answers.append(await rt.run_pass("team-a", Urgency.CHANGE))
        rt.forget("team-a", None)
        clock[0] += 50
        answers.append(await rt.run_pass("team-a", Urgency.CHANGE))
        return answers
    assert asyncio.run(scenario()) == [Requeue(600.0, Urgency.DRIFT), Requeue(500.0, Urgency.DRIFT),
                                       Requeue(2.0, Urgency.FINISH), Requeue(600.0, Urgency.DRIFT),
                                       Requeue(5.0, Urgency.DRIFT), Requeue(600.0, Urgency.DRIFT)]


def test_a_resync_overdue_after_retries_runs_at_once():
    async def scenario() -> Requeue | None:
        passes = HeldPasses()
        passes.release.set()
        rt = cell(passes, resync_seconds=600)
        rt.resync_at["team-a"] = time.monotonic() - 30
        return await rt.run_pass("team-a", Urgency.CHANGE)
    assert asyncio.run(scenario()) == Requeue(0.0, Urgency.DRIFT)


def test_a_pass_asks_for_the_soonest_of_what_falls_due():
    from datetime import UTC, datetime, timedelta


    now = datetime(2026, 11, 28, tzinfo=UTC)
    services = Services(client=None, config=OperatorConfig(), releases=None, issuer=None,  # type: ignore[arg-type]
                        memory=TenantMemory())
    run = Pass(services, {"metadata": {"name": "team-a", "uid": "u"}}, now)
    run.due(None)
    assert run.outcome.due_after is None
    run.due(now + timedelta(hours=5))
    run.due(now + timedelta(hours=2))
    run.due(now + timedelta(hours=9))
    assert run.outcome.due_after == 7200.0
    run.due(now - timedelta(minutes=1))
    assert run.outcome.due_after == 1.0


def test_changes_of_what_a_view_shows_are_one_look_again_per_settling_time(monkeypatch):
    monkeypatch.setattr("gputenant.cell.VIEW_SETTLE_SECONDS", 0.05)

    async def scenario() -> list[str]:
        passes = HeldPasses()
        passes.release.set()
        rt = cell(passes)
        rt.queue.start()
        for _ in range(3):
            rt.view_changed("team-a")
        await asyncio.sleep(0.3)
        await rt.stop_passes()
        return passes.passes
    assert asyncio.run(scenario()) == ["look again team-a"]


def test_looks_again_stop_after_max_looks_in_a_row():
    async def scenario() -> list[Requeue | None]:
        passes = HeldPasses(*[Outcome(wait_after=1.0)] * 4)
        passes.release.set()
        rt = cell(passes)
        rt.rechecks.max_looks = 3
        return [rounded(await rt.run_pass("team-a", Urgency.FINISH)) for _ in range(4)]
    assert asyncio.run(scenario()) == [Requeue(1.0, Urgency.FINISH)] * 3 + [Requeue(60.0, Urgency.DRIFT)]


def test_a_tenant_gone_or_being_deleted_is_not_reconciled():
    async def scenario() -> tuple[Requeue | None, list[str]]:
        passes = HeldPasses()
        passes.gone.add("team-a")
        rt = cell(passes)
        return await rt.run_pass("team-a", Urgency.CHANGE), passes.passes
    assert asyncio.run(scenario()) == (None, [])


def test_a_control_plane_change_judged_by_the_pass_in_flight_asks_for_no_look():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = cell(passes)
        rt.queue.start()
        rt.enqueue("team-a", Urgency.CHANGE)
        await settle()
        change = asyncio.create_task(rt.control_plane_changed("team-a", "team-a-0", (True, "rev-1")))
        await settle()
        assert not change.done()  # it waits for the pass in flight
        passes.outcomes.append(Outcome(control_plane_read_at=time.monotonic(),
                                       control_plane_pods={"team-a-0": (True, "rev-1")}))
        passes.release.set()
        await change
        await settle()
        await rt.stop_passes()
        return passes.passes
    assert asyncio.run(scenario()) == ["team-a"]


def test_a_control_plane_change_no_pass_saw_is_looked_at():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        passes.release.set()
        rt = cell(passes)
        rt.queue.start()
        await rt.control_plane_changed("team-a", "team-a-0", (True, "rev-1"))
        await settle()
        await rt.stop_passes()
        return passes.passes
    assert asyncio.run(scenario()) == ["look again team-a"]


def test_a_drift_check_asked_while_a_full_pass_is_queued_is_that_pass():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = cell(passes, workers=1)
        rt.queue.start()
        rt.enqueue("team-a", Urgency.CHANGE)
        await settle()
        rt.enqueue("team-b", Urgency.CHANGE)
        rt.enqueue("team-b", Urgency.DRIFT)
        passes.release.set()
        await settle(40)
        await rt.stop_passes()
        return passes.passes
    assert asyncio.run(scenario()) == ["team-a", "team-b"]


def test_stopping_cancels_the_passes_in_flight_before_they_write_anything():
    async def scenario() -> tuple[list[str], list[str], int]:
        passes = HeldPasses()
        rt = cell(passes, workers=1)
        judged: list[str] = []
        rt.rechecks.judged = lambda name, outcome: judged.append(name)  # type: ignore[method-assign]
        rt.queue.start()
        rt.enqueue("team-a", Urgency.CHANGE)
        rt.enqueue("team-b", Urgency.FINISH)
        await settle()
        await rt.stop_passes()
        passes.release.set()
        rt.enqueue("team-c", Urgency.CHANGE)  # nothing starts any more
        await settle()
        return passes.passes, judged, rt.queue.waiting() + rt.queue.in_flight
    assert asyncio.run(scenario()) == (["look again team-b"], [], 0)


class Looked:
    """Stands in for the API client: the tenant body it answers a GET with, and how often it was asked."""

    def __init__(self, body: dict) -> None:
        self.body, self.gets = body, 0

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        self.gets += 1
        return self.body


def test_a_pass_starts_from_the_index_until_a_pass_ran_then_only_at_the_version_its_last_status_write_made():
    """`Reconciler.current`, which every pass of the queue reads the tenant with."""
    written = {"metadata": {"name": "team-a", "uid": "uid-team-a", "resourceVersion": "41"}, "status": {"x": 1}}
    changed = {"metadata": {"name": "team-a", "uid": "uid-team-a", "resourceVersion": "42"}, "status": {"x": 1}}
    client = Looked(changed)
    reconciler = Reconciler(client, CONFIG, None, None)  # type: ignore[arg-type]
    reconciler.services.cache.hand_over({"tenants": {"team-a": [pack(written)]}})
    assert asyncio.run(reconciler.current("team-a")) == written and client.gets == 0  # no pass of ours yet
    reconciler.memory.seen("team-a", "uid-team-a")  # a pass ran, its status write is not in the index yet
    assert asyncio.run(reconciler.current("team-a")) is changed and client.gets == 1
    reconciler.memory.status_written("uid-team-a", "41")
    assert asyncio.run(reconciler.current("team-a")) == written and client.gets == 1
    reconciler.services.cache.tenants = {"team-a": [pack(changed)]}  # someone wrote the tenant since
    assert asyncio.run(reconciler.current("team-a")) is changed and client.gets == 2
    assert reconciler.memory.is_last_written(written) and not reconciler.memory.is_last_written(changed)
    reconciler.forget("uid-team-a")
    assert not reconciler.memory.is_last_written(written)
