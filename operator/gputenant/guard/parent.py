"""The guard's child process ends with the operator that started it, even when the operator gets
no chance to say so (SIGKILL, an OOM kill): a guard left listening would keep answering for a
configuration nobody maintains, and hold its port against the next operator.

Two independent watches raise ParentGone in the child's main thread: the kernel's parent-death
signal (``prctl(PR_SET_PDEATHSIG)``, Linux), and a thread blocked on multiprocessing's pipe to the
parent, which the kernel closes when the parent dies (any POSIX system). The signal is also sent
when only the parent's *thread* that started the child ends (the kernel tracks the thread), so the
handler acts only once the parent process is really gone: the child has been reparented."""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading

PARENT_DEATH_SIGNAL = signal.SIGUSR1
"""Not SIGTERM: the operator's own stop() terminates a child that did not stop in time with it."""
PR_SET_PDEATHSIG = 1


class ParentGone(BaseException):
    """Raised in the child's main thread when the process that started it has died. A
    BaseException, so that no ``except Exception`` on the way swallows it."""


def exit_with_parent(parent_pid: int) -> None:
    """From now on, raise ParentGone in this (main) thread once `parent_pid` is no longer this
    process's parent; at once if it already is not."""

    def on_signal(_signum: int, _frame: object) -> None:
        if os.getppid() != parent_pid:
            raise ParentGone()

    signal.signal(PARENT_DEATH_SIGNAL, on_signal)
    set_parent_death_signal(PARENT_DEATH_SIGNAL)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_signal_when_gone, args=(parent,), name="gputenant-guard-parent", daemon=True).start()
    if os.getppid() != parent_pid:  # died before the watches were set
        raise ParentGone()


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies; False where the
    system has no such request (not Linux), which leaves the pipe watch alone."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def _signal_when_gone(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()  # returns when the pipe to the parent closes: the parent exited or was killed
    os.kill(os.getpid(), PARENT_DEATH_SIGNAL)
