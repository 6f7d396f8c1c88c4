"""Reconciliation yields the CPU to the admission guard's process (handlers.lower_priority)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gputenant.handlers import RECONCILE_NICENESS

PROGRAM = textwrap.dedent("""
    import asyncio, os, threading
    from gputenant.handlers import lower_priority

    def nice(tid):
        return os.getpriority(os.PRIO_PROCESS, int(tid))

    async def main():
        idle = threading.Event()
        waiting = threading.Thread(target=idle.wait)
        waiting.start()
        before = {tid: nice(tid) for tid in os.listdir("/proc/self/task")}
        await asyncio.to_thread(lower_priority, {increment})  # as the startup handler calls it
        after = {tid: nice(tid) for tid in os.listdir("/proc/self/task") if tid in before}
        later = threading.Thread(target=lambda: print("later", nice(threading.get_native_id())))
        later.start(); later.join()
        child = await asyncio.create_subprocess_exec("sh", "-c", "cut -d' ' -f19 /proc/self/stat",
                                                     stdout=asyncio.subprocess.PIPE)
        print("child", int((await child.communicate())[0]))
        print("threads", sorted(after[tid] - before[tid] for tid in after))
        idle.set()

    asyncio.run(main())
""")


def test_every_thread_and_later_children_yield_the_cpu():
    """The startup handler calls it from a worker thread: os.nice there would leave kopf's event loop,
    and the helm processes it starts, at full priority (Linux keeps a niceness per thread)."""
    answer = subprocess.run([sys.executable, "-c", PROGRAM.replace("{increment}", str(RECONCILE_NICENESS))],
                            capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) for line in answer.stdout.splitlines())
    assert lines["threads"] == str([RECONCILE_NICENESS] * 2)  # main (the event loop) and the waiting thread
    assert int(lines["later"]) >= RECONCILE_NICENESS
    assert int(lines["child"]) >= RECONCILE_NICENESS
