"""The guard's child process ends when the process that started it dies, by either watch alone
(the kernel's parent-death signal, the pipe to the parent) or both, and survives the end of the
parent's thread that started it (the kernel sends the signal then too). Real processes, no cluster; the
operator's own guard process is killed with its operator in e2e/tests/test_guard_process.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubeplane import wait_for

PARENT = textwrap.dedent('''
    import multiprocessing, os, sys, threading, time
    from gputenant.guard import parent as watch

    def child(parent_pid, ready, ping, pong, watches):
        if watches == "pipe-only":
            watch.set_parent_death_signal = lambda _signum: False
        if watches == "signal-only":
            watch.multiprocessing.parent_process = lambda: None
        wake = threading.Event()
        gone = watch.watch_parent(parent_pid, on_gone=wake.set)
        threading.Thread(target=lambda: [pong.put(x) for x in iter(ping.get, None)], daemon=True).start()
        ready.set()
        while not wake.wait(watch.CHECK_SECONDS) and not gone.is_set():  # as the guard's main thread
            pass
        ping.cancel_join_thread()  # nobody reads the queues any more
        pong.cancel_join_thread()

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        ready, ping, pong = context.Event(), context.Queue(), context.Queue()
        started = {}
        threads_before = len(os.listdir("/proc/self/task"))

        def start():
            started["child"] = context.Process(target=child, daemon=True,
                                               args=(os.getpid(), ready, ping, pong, sys.argv[1]))
            started["child"].start()

        starter = threading.Thread(target=start)
        starter.start()
        starter.join()
        while len(os.listdir("/proc/self/task")) > threads_before:  # the starter's OS thread is gone
            time.sleep(0.01)
        assert ready.wait(60)
        ping.put("alive")
        print(started["child"].pid, pong.get(timeout=60), flush=True)
        threading.Event().wait()
''')


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it no longer runs or listens)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("watches", ["both", "pipe-only", "signal-only"])
def test_the_child_outlives_its_starting_thread_and_ends_with_its_parent(tmp_path, watches):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), watches], stdout=subprocess.PIPE, text=True,
                              cwd=tmp_path)
    try:
        child_pid, answer = parent.stdout.readline().split()
        assert answer == "alive", "the child died when the parent's starting thread ended"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: gone(int(child_pid)), timeout=60, interval=0.1,
                 what=f"the child {child_pid} to end with its parent ({watches})")
    finally:
        if parent.poll() is None:
            parent.kill()
