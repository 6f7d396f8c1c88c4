"""Run the background loops as named asyncio tasks: a loop that ends with an unexpected error is
logged with its traceback and started again after `restart_after` seconds, instead of dying
unnoticed (asyncio reports a failed task only when it is garbage-collected); `stop` cancels them
all and waits for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Loop = Callable[[], Awaitable[None]]


class Supervisor:
    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task] = {}
        self.restarts: dict[str, int] = {}

    def start(self, name: str, loop: Loop, restart_after: float) -> None:
        """Run `loop()` as the task `gputenant-<name>`; again after `restart_after` seconds
        whenever it raises. A loop that returns is done."""
        if name in self.tasks:
            raise ValueError(f"loop {name} is already running")
        self.restarts[name] = 0
        self.tasks[name] = asyncio.create_task(self._keep(name, loop, restart_after), name=f"gputenant-{name}")

    async def _keep(self, name: str, loop: Loop, restart_after: float) -> None:
        while True:
            try:
                await loop()
                return
            except Exception:
                self.restarts[name] += 1
                log.exception("background loop %s failed; restarting it in %gs", name, restart_after)
            await asyncio.sleep(restart_after)

    async def stop(self) -> None:
        """Cancel every loop, newest first, and wait until each has ended."""
        for name in reversed(list(self.tasks)):
            task = self.tasks.pop(name)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
