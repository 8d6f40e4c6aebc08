"""CPU time of processes and threads, as the kernel counts it (/proc/<pid>/stat).

CPU time measures work done, not wall-clock time, so a bound on it holds on a loaded
machine: a loop that waits costs next to nothing however long it waits, a busy loop costs
a core's worth whatever else runs.
"""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _fields(stat_path: Path) -> list[str]:
    """The fields after the command name (which may hold spaces and parentheses)."""
    text = stat_path.read_text()
    return text[text.rindex(")") + 2 :].split()


# Field numbers of proc(5), counted from `state` (field 3) as index 0.
_STATE, _PPID, _UTIME, _STIME, _CUTIME, _CSTIME, _STARTTIME = 0, 1, 11, 12, 13, 14, 19


def thread_cpu_s(native_id: int, pid: int | None = None) -> float:
    """User + system CPU seconds of one thread (`threading.Thread.native_id`) of `pid` (this process)."""
    f = _fields(Path(f"/proc/{pid or os.getpid()}/task/{native_id}/stat"))
    return (int(f[_UTIME]) + int(f[_STIME])) / CLOCK_TICKS


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and of its children it has reaped."""
    f = _fields(Path(f"/proc/{pid}/stat"))
    return sum(int(f[i]) for i in (_UTIME, _STIME, _CUTIME, _CSTIME)) / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_fields(entry / "stat")[_PPID])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and everything below it, each second counted once: a live
    process's own time, and a reaped one's in its parent's children's time."""
    total = 0.0
    for member in descendants(pid):
        try:
            total += process_cpu_s(member)
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile: its time is in its parent's once reaped
    return total


def identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time) of a live process, None once it has ended (a zombie has): a pid
    reused by a new process has another start time, so it is never taken for the old one."""
    try:
        f = _fields(Path(f"/proc/{pid}/stat"))
    except (OSError, IndexError):
        return None
    return None if f[_STATE] == "Z" else (pid, int(f[_STARTTIME]))


def still_running(processes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Those of `processes` (from `identity`) that still run."""
    return {p for p in processes if identity(p[0]) == p}
