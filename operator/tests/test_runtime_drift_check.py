"""The drift timer's pass against full passes of the same tenant (runtime.Runtime.drift_check): left
out while a full pass is waiting to start, which reads everything after the timer fired; run after
a full pass that is already running, which may have read before the drift."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from gputenant.config.models import OperatorConfig
from gputenant.reconcile.context import Outcome
from gputenant.runtime import Runtime

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))


class HeldPasses:
    """Stands in for the Reconciler: records each pass and holds it until `release`."""

    def __init__(self) -> None:
        self.passes: list[str] = []
        self.release = asyncio.Event()

    async def reconcile(self, body: dict, *, recheck: bool = False) -> Outcome:
        self.passes.append(body["metadata"]["name"])
        await self.release.wait()
        return Outcome()


def runtime(passes: HeldPasses, slots: int = 8) -> Runtime:
    return Runtime(config=CONFIG, client=None, reconciler=passes,  # type: ignore[arg-type]
                   resync_seconds=60, deletion_retry_seconds=10, reconcile_slots=asyncio.Semaphore(slots))


def tenant(name: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_drift_check_is_left_to_a_full_pass_waiting_for_a_slot():
    async def scenario() -> tuple[list[str], dict[str, int]]:
        passes = HeldPasses()
        rt = runtime(passes, slots=1)
        running = asyncio.create_task(rt.reconcile(tenant("team-a")))
        waiting = asyncio.create_task(rt.reconcile(tenant("team-b")))
        await settle()
        check = asyncio.create_task(rt.drift_check(tenant("team-b")))
        await settle()
        assert check.done()  # at once: team-b's pass has not started and will read after it
        passes.release.set()
        await asyncio.gather(running, waiting, check)
        return passes.passes, rt.waiting
    assert asyncio.run(scenario()) == (["team-a", "team-b"], {})


def test_a_drift_check_runs_after_a_full_pass_already_running():
    async def scenario() -> list[str]:
        passes = HeldPasses()
        rt = runtime(passes)
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
        rt = runtime(passes, slots=1)
        running = asyncio.create_task(rt.reconcile(tenant("team-a")))
        waiting = asyncio.create_task(rt.reconcile(tenant("team-b")))
        await settle()
        waiting.cancel()
        await settle()
        assert rt.waiting == {}
        passes.release.set()
        await asyncio.gather(running, rt.drift_check(tenant("team-b")))
        return passes.passes
    assert asyncio.run(scenario()) == ["team-a", "team-b"]
