"""One `make run` per state folder: the lock it holds while it runs, and who holds it.

`make run` takes an exclusive flock on STATE/run.lock before it touches anything and holds it
until it exits. The kernel drops the lock however the process ends, `kill -9` included, so a
lock that can be taken means that no `make run` runs on that folder: what a killed run left
behind is then cleaned up as before. A lock that cannot be taken means one runs: a second
`make run` refuses at once and names it, instead of stopping its processes and servers as
leftovers (it did: the first stack lost its Redis and the second's web never got its socket).

The lock file holds the holder's pid and start time; `.state/stack.json` adds the web's URL
once the stack is announced. `make status`, `make stop` (scripts/stack_ctl.py) and `make
clean-state` ask `running()`, which probes with a shared lock and never blocks a start.
Standard library only: `make clean-state` runs without the virtualenv.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

LOCK_FILE = "run.lock"
STACK_FILE = "stack.json"
#: How long a start retries a lock held for an instant (a `make status` probing it).
ACQUIRE_PATIENCE_S = 1.0


@dataclass(frozen=True)
class RunningStack:
    """The `make run` holding a state folder's lock, as far as its files tell."""

    state: Path
    pid: int | None
    started_at: str | None
    #: The web's URL (stack.json); None while the stack is still starting.
    base_url: str | None

    def describe(self) -> str:
        """`pid 1234, since …, web http://…/` in one line."""
        parts = [f"pid {self.pid}" if self.pid else "pid unknown"]
        if self.started_at:
            parts.append(f"since {self.started_at}")
        parts.append(
            f"web {self.base_url}/, console {self.base_url}/admin/"
            if self.base_url
            else "still starting (its banner will name the web's URL)"
        )
        return ", ".join(parts)

    def refusal(self) -> list[str]:
        """What a second `make run` on the same folder says before it stops, touching nothing."""
        return [
            f"`make run` is already running on {self.state}: {self.describe()}",
            "nothing was started or stopped. Use that stack (`make status` lists its processes), or stop it "
            "first: Ctrl-C in its terminal, or `make stop` in this folder"
            + (f" (`kill {self.pid}`)" if self.pid else "")
            + ". A second stack beside it needs a state folder of its own: "
            "MI_STATE_DIR=/another/folder make run",
        ]


@dataclass
class StackLock:
    """The held lock: kept open for the life of the process (the kernel releases it at exit)."""

    handle: IO[str]
    path: Path


def _open(path: Path) -> IO[str]:
    # 0600 from its first byte, as every file of the state folder; not inherited by children
    # (Python opens with O_CLOEXEC), so only `make run` itself holds it.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return os.fdopen(fd, "r+")


def acquire(state: Path) -> StackLock | RunningStack:
    """The lock of `state`, or the stack that holds it (nothing is changed then)."""
    path = state / LOCK_FILE
    handle = _open(path)
    deadline = time.monotonic() + ACQUIRE_PATIENCE_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                holder = running(state)
                return holder if holder is not None else acquire(state)
            time.sleep(0.05)
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "started_at": _now()}) + "\n")
    handle.flush()
    return StackLock(handle, path)


def running(state: Path) -> RunningStack | None:
    """The `make run` running on `state`, or None when none does (its lock is free)."""
    path = state / LOCK_FILE
    try:
        handle = path.open("r")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _json(handle.read())
        else:
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
    pid = info.get("pid")
    pid = pid if isinstance(pid, int) and pid > 0 else None
    stack = {}
    with contextlib.suppress(OSError):
        stack = _json((state / STACK_FILE).read_text())
    base_url = stack.get("base_url") if pid is not None and stack.get("pid") == pid else None
    started = info.get("started_at")
    return RunningStack(
        state=state,
        pid=pid,
        started_at=started if isinstance(started, str) else None,
        base_url=base_url if isinstance(base_url, str) else None,
    )


def _json(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
