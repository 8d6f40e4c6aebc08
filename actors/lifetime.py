"""The worker processes' lifetime: they die with the worker's main process.

Without it a worker process outlives a main process killed alone (the OOM killer, an
operator): unsupervised, next to the one supervisord starts again, still taking jobs, its
output read by no one (found by the soak, bench/soak.py). actors.run_worker remembers its
pid before Dramatiq forks the worker processes, which inherit it; each asks the kernel for
a SIGKILL when its parent dies (`PR_SET_PDEATHSIG`) as it boots (actors/bootstrap.py), as a
SIGKILL of the whole group would end it: its jobs in flight come back through the reaper.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1

#: The main process's pid, set by actors.run_worker in it before it forks; None elsewhere
#: (a test's worker in its own process: nothing to do).
_main_pid: int | None = None


def remember_main_process() -> None:
    global _main_pid  # noqa: PLW0603 - one value per process tree, inherited by the forks
    _main_pid = os.getpid()


def die_with_main_process() -> None:
    """In a worker process: be SIGKILLed when the main process dies."""
    if _main_pid is None or _main_pid == os.getpid():
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _main_pid:  # it died before the line above
        os.kill(os.getpid(), signal.SIGKILL)
