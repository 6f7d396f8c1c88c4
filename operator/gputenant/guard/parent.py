"""The guard's child process ends with the operator that started it, even when the operator gets
no chance to say so (SIGKILL, an OOM kill): a guard left listening would keep answering for a
configuration nobody maintains, and hold its port against the next operator.

Two independent watches set the `gone` event: the kernel's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``, Linux), and a thread blocked on multiprocessing's pipe to the parent,
which closes when the parent process ends (any POSIX system), and which also calls `on_gone` to
wake the child at once. The signal is also sent when only the parent's *thread* that started the
child ends (the kernel tracks the thread), so it counts only once the child has been reparented.
Neither raises into the child: a signal may be delivered to any of its threads, so the child's
main thread checks `gone` at least every CHECK_SECONDS."""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable

PARENT_DEATH_SIGNAL = signal.SIGUSR1
"""Not SIGTERM: the operator's own stop() terminates a child that did not stop in time with it."""
PR_SET_PDEATHSIG = 1
CHECK_SECONDS = 1.0
"""How often the child's main thread looks at `gone` at the latest."""


def watch_parent(parent_pid: int, on_gone: Callable[[], None] = lambda: None) -> threading.Event:
    """An event set once `parent_pid` is no longer this process's parent (at once if it already
    is not); `on_gone` is called from the pipe watch's thread when that sees it."""
    gone = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        if os.getppid() != parent_pid:
            gone.set()

    signal.signal(PARENT_DEATH_SIGNAL, on_signal)
    set_parent_death_signal(PARENT_DEATH_SIGNAL)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_watch_pipe, args=(parent, gone, on_gone), name="gputenant-guard-parent",
                         daemon=True).start()
    if os.getppid() != parent_pid:  # died before the watches were set
        gone.set()
    return gone


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies; False where the
    system has no such request (not Linux), which leaves the pipe watch alone."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def _watch_pipe(parent: multiprocessing.process.BaseProcess, gone: threading.Event,
                on_gone: Callable[[], None]) -> None:
    parent.join()  # returns when the pipe to the parent closes: only the parent process holds its other end
    gone.set()
    on_gone()
