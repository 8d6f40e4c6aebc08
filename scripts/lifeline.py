"""What a test run (or a benchmark) starts ends when the run ends, however it ends.

Without it, a worker started by a `make test` that is killed runs on unattended. The
processes tests start live in sessions of their own (so a signal reaches their
children), which also takes them out of reach of whatever stops the test runner.

`attach()` gives the calling process a lifeline, once: a mark, `MI_LIFELINE_<token>=1`,
put in its environment (so every process it starts, and theirs, inherits it, whatever
session or process group they move to) and a watchdog, `python -m scripts.lifeline watch
PID TOKEN`, in a session of its own. The watchdog holds a pidfd of the process and waits
for it to exit (a normal exit, an exception, SIGKILL: the kernel reports each the same
way); then it ends every process carrying the mark, and every process of the sessions
registered with `track` (SIGTERM, SIGKILL after `GRACE_S`, again until none is left), and
removes the folders registered with `remove_on_exit`. Sessions, because a server that
sets its process title (redis-server, postgres) writes over its environment in /proc, so
its mark cannot be read: whoever starts one in a session of its own tracks it.
A watchdog rather than PR_SET_PDEATHSIG in each child: that signal reaches only the
child itself, not its own children (a worker's processes, a database's backends), and
fires when the forking *thread* ends, not the process.

Used by tests/conftest.py (the pytest process), scripts/processes.py (`SessionProcess`,
which also adds the marks to environments built by hand), scripts/with_test_services.py
and scripts/test_shards.py. `make run` does not use it: its servers are meant to outlive
a killed run (the next run stops them, see scripts/run_stack.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Environment variables named so mark the processes of a lifeline.
PREFIX = "MI_LIFELINE_"
#: How long the marked processes get to stop after SIGTERM before SIGKILL.
GRACE_S = 5.0
#: Rounds of sweeping: a process may start another while the first round ends it.
SWEEPS = 20

#: pid -> mark of the lifeline attached in that process (a forked child gets its own).
_attached: dict[int, str] = {}


def attach() -> str:
    """Give this process a lifeline (once; again in a forked child); the mark's name."""
    if os.getpid() in _attached:
        return _attached[os.getpid()]
    token = secrets.token_hex(6)
    mark = PREFIX + token
    subprocess.Popen(
        [sys.executable, "-m", "scripts.lifeline", "watch", str(os.getpid()), token],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    # Set after the watchdog started, so that it does not carry its own mark.
    os.environ[mark] = "1"
    _attached[os.getpid()] = mark
    return mark


def marks() -> dict[str, str]:
    """The lifeline marks this process carries (its own and its ancestors'): for an
    environment built by hand, so the process started with it is still ended with them."""
    return {name: value for name, value in os.environ.items() if name.startswith(PREFIX)}


def remove_on_exit(path: Path) -> None:
    """Have this process's watchdog remove `path` (a folder) once the process has ended."""
    mark = attach()
    _register(mark.removeprefix(PREFIX), f"remove {path}")


def track(pid: int) -> None:
    """`pid` leads a session of its own (`start_new_session`): end that whole session with
    every lifeline this process carries (none: nothing to do, e.g. under `make run`)."""
    start = _stat(pid)
    if start is None:
        return
    for mark in marks():
        _register(mark.removeprefix(PREFIX), f"session {pid} {start[_STARTTIME]}")


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment holds NAME=VALUE (this one aside), however orphaned.
    Only readable environments count (our user's, or all as root)."""
    entry = f"{name}={value}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if entry in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def _registry(token: str) -> Path:
    return Path(tempfile.gettempdir()) / f"mi-lifeline-{token}"


def _register(token: str, line: str) -> None:
    with _registry(token).open("a") as handle:
        handle.write(line + "\n")


# Fields of /proc/<pid>/stat (proc(5)), counted from `state` (field 3) as index 0.
_STATE, _SESSION, _STARTTIME = 0, 3, 19


def _stat(pid: int) -> list[str] | None:
    """The fields of a live process's stat from `state` on; None once it has ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[_STATE] == "Z" else fields  # a zombie has ended


def _session_members(leaders: list[tuple[int, str]]) -> list[int]:
    """Live processes of the sessions whose leader is still the one registered (or gone:
    its session lives on in its children), never a session a reused pid leads now."""
    sessions = set()
    for pid, start in leaders:
        fields = _stat(pid)
        if fields is None or fields[_STARTTIME] == start:
            sessions.add(str(pid))
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and (fields := _stat(int(proc.name))) and fields[_SESSION] in sessions:
            found.append(int(proc.name))
    return found


def _targets(token: str) -> list[int]:
    leaders = []
    with contextlib.suppress(OSError):
        for line in _registry(token).read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "session":
                pid, start = rest.split()
                leaders.append((int(pid), start))
    found = set(pids_with_env(PREFIX + token, "1")) | set(_session_members(leaders))
    return sorted(pid for pid in found if pid != os.getpid() and _stat(pid) is not None)


def sweep(token: str) -> list[int]:
    """End every process of the lifeline `token`, then remove its registered folders; the pids ended."""
    ended: list[int] = []
    for _ in range(SWEEPS):
        pids = _targets(token)
        if not pids:
            break
        ended += pids
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + GRACE_S
            while (pids := [pid for pid in pids if _stat(pid) is not None]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not pids:
                break
    registry = _registry(token)
    with contextlib.suppress(OSError):
        for line in registry.read_text().splitlines():
            kind, _, path = line.partition(" ")
            if kind == "remove" and path:
                shutil.rmtree(path, ignore_errors=True)
    registry.unlink(missing_ok=True)
    return ended


class _Stopped(Exception):
    """SIGTERM: an outer lifeline is sweeping (it carries this watchdog's mark too)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def watch(pid: int, token: str) -> None:
    """Wait for process `pid` (our parent) to end, then sweep its lifeline; at once on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the runner is not for us
    signal.signal(signal.SIGTERM, _stop)
    try:
        try:
            handle: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            handle = None
        # Still our parent once the pidfd is open: it names that process, not a reused pid.
        if handle is not None and os.getppid() == pid:
            select.select([handle], [], [])  # readable once the process has ended
    except _Stopped:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the sweep (SIGKILL still ends it)
    sweep(token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    watching = sub.add_parser("watch", help="wait for PID to end, then end what carries its mark")
    watching.add_argument("pid", type=int)
    watching.add_argument("token")
    args = parser.parse_args(argv)
    watch(args.pid, args.token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
