"""Make a `dramatiq` worker on this broker shut down gracefully under Procfile runners.

honcho, foreman, systemd (KillMode=control-group) and Heroku send SIGTERM to every
process of the group. A Dramatiq worker process then gets SIGTERM twice within
milliseconds: once from the runner and once forwarded by Dramatiq's main process, and
Dramatiq treats a second signal as "kill now", dropping the messages in flight
(they would only come back through the reaper a minute later). We ignore a repeat
that arrives within `DUPLICATE_WINDOW_SECONDS` of the first; a deliberate second
signal later on still forces the exit.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

#: Repeats of a signal closer together than this are one signal sent twice.
DUPLICATE_WINDOW_SECONDS = 2.0


def debounce_worker_sigterm() -> bool:
    """Wrap the SIGTERM handler of a Dramatiq worker process; True if one was wrapped."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler) or "worker_process" not in getattr(handler, "__qualname__", ""):
        return False  # not inside a Dramatiq worker process (web, tests, the main process)
    first_at: list[float] = []

    def debounced(signum: int, frame: FrameType | None) -> Any:
        now = time.monotonic()
        if first_at and now - first_at[0] < DUPLICATE_WINDOW_SECONDS:
            return None
        first_at[:] = [now]
        return handler(signum, frame)

    signal.signal(signal.SIGTERM, debounced)
    return True
