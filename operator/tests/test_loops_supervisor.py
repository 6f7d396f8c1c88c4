"""The background loops' supervisor: a loop that fails is logged and started again, one that
returns is done, and stop cancels every loop and waits for it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gputenant.loops import Supervisor


def test_a_failing_loop_is_logged_and_restarted_and_stop_cancels_it(caplog):
    calls: list[str] = []
    cancelled = asyncio.Event()

    async def flaky() -> None:
        calls.append("run")
        if len(calls) == 1:
            raise RuntimeError("first run breaks")
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def main() -> Supervisor:
        supervisor = Supervisor()
        supervisor.start("flaky", flaky, restart_after=0)
        while len(calls) < 2:
            await asyncio.sleep(0)
        await supervisor.stop()
        return supervisor

    with caplog.at_level(logging.ERROR, logger="gputenant.loops.supervisor"):
        supervisor = asyncio.run(main())
    assert calls == ["run", "run"] and cancelled.is_set()
    assert supervisor.restarts == {"flaky": 1} and supervisor.tasks == {}
    [record] = caplog.records
    assert record.getMessage() == "background loop flaky failed; restarting it in 0s" and record.exc_info


def test_a_loop_that_returns_is_not_started_again_and_names_are_unique():
    calls: list[str] = []

    async def once() -> None:
        calls.append("run")

    async def main() -> None:
        supervisor = Supervisor()
        supervisor.start("once", once, restart_after=0)
        with pytest.raises(ValueError, match="loop once is already running"):
            supervisor.start("once", once, restart_after=0)
        await supervisor.tasks["once"]
        assert supervisor.tasks["once"].get_name() == "gputenant-once"
        await supervisor.stop()

    asyncio.run(main())
    assert calls == ["run"]
