"""A process's held events on disk, so that a process killed while holding them loses none.

The event sink (redis_adapters/event_sink.py) holds in memory the events neither Redis nor
PostgreSQL takes, and hands them over again once one answers. A process that ends meanwhile
(SIGKILL, the OOM killer, a supervisor's restart) would lose them: the soak found eight web
events lost in an hour, each in a web process killed while both servers refused it.

So each held event is also appended to a file of the process's own in `EVENT_SPOOL_DIR`
(one folder per host and stack, as `PROMETHEUS_MULTIPROC_DIR`), and the file is emptied
once the memory holds nothing more. The process keeps an exclusive `flock` on its file for
its whole life; the kernel drops it when the process ends, however it ends. A process
starting on the host (every process with an event sink) takes over the files nobody locks:
it copies their events into its own file first, removes them, and hands the events over as
its own held ones. An event handed over twice is stored once (the event log's insert is
idempotent on its id), so a copy in two files, or a file read by two processes, costs
nothing.

The file is JSON lines, one event per line (`Event.encode`); a line cut by a kill in the
middle of a write is skipped and counted.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from services.domain.events import Event, InvalidEvent

logger = logging.getLogger(__name__)

#: Suffix of the spool files, one per process: `<pid>-<random>.events`.
SPOOL_SUFFIX = ".events"


def spool_at(folder: str) -> EventSpool | None:
    """The spool in `folder` (EVENT_SPOOL_DIR), or none when it is unset ("")."""
    return EventSpool(folder) if folder else None


class EventSpool:
    """The spool folder of this host's processes, and this process's own file in it.

    Not thread-safe by itself: the event sink calls it under its own lock.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        #: This process's file, its name and the pid that opened it: set at the first use.
        self._fd: int | None = None
        self._name = ""
        self._pid = 0
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """This process's file (created at the first event held, or taken over)."""
        return self.folder / self._name

    def _own(self) -> int:
        """The descriptor of this process's file, created and locked at first use.

        After a fork the child makes a file of its own, and closes the descriptor it
        inherited: a `flock` belongs to the open file, which the child's copy would keep
        locked after the parent ended, so the parent's events would never be taken over."""
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._fd is not None:
            os.close(self._fd)  # the parent's, inherited: only its own copy may keep the lock
            self._fd = None
        self._pid = os.getpid()
        self._name = f"{self._pid}-{uuid.uuid4().hex[:12]}{SPOOL_SUFFIX}"
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fd = fd
        return fd

    def append(self, events: Sequence[Event]) -> None:
        """Keep `events` on disk (written and fsynced before returning). Raises OSError."""
        if not events:
            return
        data = b"".join(event.encode().encode("utf-8", "backslashreplace") + b"\n" for event in events)
        with self._lock:
            fd = self._own()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)

    def clear(self) -> None:
        """Nothing is held any more: empty this process's file."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.ftruncate(self._fd, 0)

    def take_over(self) -> list[Event]:
        """The events of files no living process locks (processes that ended holding events),
        copied into this process's file first; their files are removed. Never raises: a folder
        that cannot be read is logged and yields nothing."""
        try:
            candidates = sorted(self.folder.glob(f"*{SPOOL_SUFFIX}"))
        except OSError as exc:
            logger.warning("events: cannot read the spool folder %s: %s", self.folder, exc)
            return []
        taken: list[Event] = []
        for path in candidates:
            if path.name == self._name and self._pid == os.getpid():
                continue  # ours (locked by us anyway)
            try:
                events = self._take_file(path)
            except OSError as exc:
                logger.warning("events: cannot take over the spool file %s: %s", path, exc)
                continue
            taken.extend(events)
        return taken

    def _take_file(self, path: Path) -> list[Event]:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:  # taken over by another process meanwhile
            return []
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its process is alive
                return []
            if os.fstat(fd).st_nlink == 0:  # removed by the process that took it before us
                return []
            with os.fdopen(os.dup(fd), "rb") as file:
                lines = file.read().splitlines()
            events, damaged = _decode(lines)
            if events:
                # Ours before theirs is removed: a kill in between leaves a copy, not a loss.
                self.append(events)
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        if events or damaged:
            logger.warning(
                "events: took over %d event(s) held by a process that ended (%s)%s",
                len(events),
                path.name,
                f"; {damaged} damaged line(s) skipped" if damaged else "",
            )
        return events


def _decode(lines: Sequence[bytes]) -> tuple[list[Event], int]:
    """The events of a spool file's lines, and how many lines could not be read (a write cut
    by the kill, at most the last)."""
    events: list[Event] = []
    damaged = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            events.append(Event.decode(line))
        except (InvalidEvent, ValueError, UnicodeDecodeError):
            damaged += 1
    return events, damaged
