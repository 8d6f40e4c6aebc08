"""A process's heartbeat into the process registry (observability/liveness.py).

A daemon thread writes this process's beat every `BEAT_INTERVAL_S`, saying what the
process is doing now (asked of a callable each time), and once a minute prunes the
processes gone for an hour. A Redis error is retried at the next beat and logged once, then
summarised while it lasts, then its end (broker/src/listbroker/backoff.py): a heartbeat must never
stop the work it reports on, nor flood its log. `stop()` writes a last beat saying
`stopped`, so a clean exit is not mistaken for a crash.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from listbroker import Backoff

from observability.liveness import (
    BEAT_INTERVAL_S,
    STOPPED,
    ProcessIdentity,
    prune_beats,
    write_beat,
)

logger = logging.getLogger(__name__)

#: Prune the registry every this many beats (once a minute at the default interval).
PRUNE_EVERY_BEATS = 12


class Heartbeat:
    def __init__(
        self,
        client: redis.Redis,
        kind: str,
        doing: Callable[[], str],
        *,
        interval_s: float = BEAT_INTERVAL_S,
        load: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """`load`: (busy threads, threads), for a worker process's beat (busy / concurrency)."""
        self.client = client
        self.identity = ProcessIdentity.current(kind)
        self.doing = doing
        self.load = load
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{kind}", daemon=True)
        # Beats keep their interval while failing (the next one is the retry): logging only.
        self._backoff = Backoff(
            f"Heartbeat of this {kind} process", logger, first_s=interval_s, max_s=interval_s
        )

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End the beats and write the last one, `stopped`, all within `timeout`: a Redis that
        hangs must not hold the process's exit (its entry then ages into "gone")."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning(
                "heartbeat: its beat still waits on Redis; no last beat (the process shows as gone)"
            )
            return
        last = threading.Thread(
            target=self._beat, args=(STOPPED,), name=f"{self._thread.name}-last", daemon=True
        )
        last.start()
        last.join(max(0.0, deadline - time.monotonic()))

    def _beat(self, doing: str) -> None:
        try:
            load = self.load() if self.load is not None and doing != STOPPED else None
            write_beat(self.client, self.identity, doing, load=load)
        except (redis.RedisError, OSError) as exc:
            self._backoff.failed(exc)
            return
        self._backoff.succeeded()

    def _run(self) -> None:
        beats = 0
        while not self._stop.is_set():
            try:
                doing = self.doing()
            except Exception:  # a broken reporter must not end the heartbeat
                logger.exception("heartbeat: could not tell what the process is doing")
                doing = "unknown"
            self._beat(doing)
            beats += 1
            if beats % PRUNE_EVERY_BEATS == 1:
                # A failed prune is done by the next one, or by another process's.
                with contextlib.suppress(redis.RedisError, OSError):
                    prune_beats(self.client)
            self._stop.wait(self.interval_s)


class Activity:
    """What a process is doing, for its heartbeat: the tasks running now, or `idle`.

    Thread-safe: the worker's threads start and end jobs concurrently. A thread may run several
    tasks at once (a worker thread running a batch of jobs: each job begins and ends on its
    own): it shows as its first task and how many more (`report 42 (+31)`), and counts as one
    busy thread.
    """

    def __init__(self, describe: Callable[[Any], str] = str, idle: str = "idle") -> None:
        """`describe`: what a task passed to `begin` is, in words; asked only when the heartbeat
        reads the activity (a job costs no more than its `begin` and `end`)."""
        self._describe = describe
        self._idle = idle
        #: token -> (thread, task). One set, pop or copy of a dict is atomic: no lock of ours
        #: (every job begins and ends a task).
        self._running: dict[object, tuple[int, Any]] = {}

    def begin(self, what: Any) -> object:
        """A task begins in this thread; `end` it with the token returned."""
        token = object()
        self._running[token] = (threading.get_ident(), what)
        return token

    def end(self, token: object) -> None:
        self._running.pop(token, None)

    def __call__(self) -> str:
        running = list(self._running.values())
        if not running:
            return self._idle
        first: dict[int, str] = {}
        more: dict[int, int] = {}
        for thread, what in running:
            if thread in first:
                more[thread] += 1
            else:
                first[thread], more[thread] = self._describe(what), 0
        return ", ".join(what if not more[t] else f"{what} (+{more[t]})" for t, what in first.items())

    def busy(self) -> int:
        """How many threads run a task now."""
        return len({thread for thread, _ in list(self._running.values())})
