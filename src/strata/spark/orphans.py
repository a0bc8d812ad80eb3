"""A child process that never outlives its parent: Linux's ``PR_SET_PDEATHSIG`` (issue 28, "a cell never outlives
its fleet process").

A process killed with SIGKILL runs no clean-up, so the children it started (a cell's Python driver, a standalone
master's JVM) would run on as orphans. ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, called in the child between ``fork``
and ``exec``, asks the kernel to SIGKILL the child when its parent dies; it survives ``exec`` (of anything but a
set-user-ID program) and is not inherited by the child's own children.

The kernel sends it when the *thread* that forked the child ends, not the process: spawn long-lived children from a
thread that lives as long as they should (the main thread), never from a short-lived worker thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def parent_death_signal() -> Callable[[], None]:
    """A function for ``subprocess.Popen(preexec_fn=...)`` that makes the child die (SIGKILL) with the process
    calling this now. Call it in the process that spawns, just before spawning: a parent that died before the
    child's ``prctl`` took effect is seen (the child's parent changed) and the child kills itself."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    prctl = getattr(libc, "prctl", None)
    if prctl is None:
        raise OSError("prctl(PR_SET_PDEATHSIG) is Linux-only: a child here could outlive its parent")
    parent = os.getpid()

    def die_with_parent() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent
