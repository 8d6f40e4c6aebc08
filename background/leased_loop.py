"""The leased periodic loop: the one skeleton of every loop of the background processes (the
hot path's answer, progress, event-log and retention loops; the reconciler's pass).

A loop is a thread running one cycle after another until its process is told to stop:

- it reads its settings before every cycle (`settings`: the hot path's change while it runs)
  and hands them to the cycle;
- a cycle works under the loop's Redis lease (redis_adapters/lock.py: it takes or renews the
  lease, and does nothing while another process holds it), and says in the process heartbeat
  what it does;
- between cycles the loop sleeps its interval in short steps, renewing its lease (it must not
  lapse while idle) and re-reading the settings (a shorter interval takes effect at once); a
  cycle that reports more to do is followed by the next at once;
- a failing cycle (a server down, a bug) is retried after a backoff (`listbroker.Backoff`:
  1 s, doubling to `max_backoff_s`, whatever the interval, so a loop of a long interval
  retries within seconds and a fast one does not spin), its failure logged once (a traceback
  unless a server is down), then a summary while it lasts, then its recovery;
- told to stop, it finishes the cycle it is in and releases its lease (`close`), so a standby
  process takes over at once; a loop still at it `STOP_GRACE_S` after the stop (a server that
  hangs: each call waits out its socket timeout) is left behind and the process exits without
  it, as if killed: the lease expires by itself, an open transaction is rolled back.

`stop_on_signals` and `run_loops` are the process around the loops: SIGTERM or SIGINT sets
the stop, the heartbeat beats while any loop runs.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Generic, TypeVar

import redis
from listbroker import Backoff

from observability.heartbeat import Activity, Heartbeat
from observability.logs import outage
from redis_adapters.lock import RedisLock

#: Shortest pause after a cycle, whatever the settings say (keeps a failing loop from spinning).
MIN_PAUSE_S = 0.01
#: Longest sleep between two looks at the settings (and lease renewals) while idle.
MAX_IDLE_STEP_S = 1.0
#: After a failed cycle a loop pauses this long, doubling while its cycles fail, at most its
#: `max_backoff_s` (DEFAULT_MAX_BACKOFF_S unless its spec says).
FAILED_FIRST_PAUSE_S = 1.0
DEFAULT_MAX_BACKOFF_S = 15.0
#: How long a process waits for its loops after the stop before it exits without them. A cycle
#: takes well under a second on servers that answer; a hung Redis made the hot path wait out
#: 30 s socket timeouts in turn, minutes in all, until supervisord's kill.
STOP_GRACE_S = 15.0
#: Longest wait for the heartbeat's last beat at exit.
LAST_BEAT_S = 5.0

S = TypeVar("S")


@dataclass(frozen=True)
class LoopSpec(Generic[S]):
    """One loop: its cycle, its timing and its lease, on settings of type `S`."""

    name: str
    #: One cycle; True when there is more to do at once (a full batch was taken).
    cycle: Callable[[S], bool]
    interval_ms: Callable[[S], int]
    #: The lease's lifetime: renewed every third of it while a cycle works and while idle.
    lease_ms: Callable[[S], int]
    lock: RedisLock
    #: Releases the lease (and what else the loop holds) when the loop stops.
    close: Callable[[], None]
    #: What the process heartbeat says while a cycle runs.
    doing: str
    #: How the log names the loop's failures and recovery ("hot path answers loop: ...").
    what: str
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S


class LeasedLoop(threading.Thread, Generic[S]):
    """The thread running a `LoopSpec` until `stop` is set; logs on `logger`."""

    def __init__(
        self,
        spec: LoopSpec[S],
        settings: Callable[[], S],
        stop: threading.Event,
        activity: Activity | None = None,
        *,
        logger: logging.Logger,
    ) -> None:
        # A daemon: a loop left behind at exit (STOP_GRACE_S) must not hold the interpreter.
        super().__init__(name=f"{logger.name}-{spec.name}", daemon=True)
        self.spec = spec
        self.settings = settings
        self.stop = stop
        self.activity = activity
        self.logger = logger
        self.cycles = 0
        self.backoff = Backoff(spec.what, logger, first_s=FAILED_FIRST_PAUSE_S, max_s=spec.max_backoff_s)

    @property
    def failures(self) -> int:
        """Cycles failed in a row (0 while the loop works)."""
        return self.backoff.attempts

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                settings = self.settings()
                if not self._cycle(settings):
                    self._pause(settings, at_least_s=self.backoff.delay)
        finally:
            self.spec.close()
            self.logger.info("%s: stopped after %d cycle(s)", self.spec.name, self.cycles)

    def _cycle(self, settings: S) -> bool:
        self.cycles += 1
        token = self.activity.begin(self.spec.doing) if self.activity is not None else None
        try:
            more = self.spec.cycle(settings)
        except Exception as exc:
            # A server down: one line; anything else: its traceback, once.
            self.backoff.failed(exc, traceback=not outage(exc))
            return False
        finally:
            if self.activity is not None and token is not None:
                self.activity.end(token)
        self.backoff.succeeded()
        return more

    def _pause(self, settings: S, *, at_least_s: float = 0.0) -> None:
        """Sleep one interval, or `at_least_s` instead when it is set (a failing loop's
        backoff), in short steps: renew the lease (it must not lapse while idle) and re-read
        the settings at each step, so a shortened interval takes effect at once."""
        started = time.monotonic()
        while not self.stop.is_set():
            wanted = at_least_s if at_least_s else self.spec.interval_ms(settings) / 1000
            remaining = started + max(MIN_PAUSE_S, wanted) - time.monotonic()
            if remaining <= 0:
                return
            # Short steps while healthy (a new interval takes effect at once); while failing,
            # only as often as the lease needs renewing.
            renew_every_s = self.spec.lease_ms(settings) / 3000
            step = min(remaining, renew_every_s if at_least_s else MAX_IDLE_STEP_S, renew_every_s)
            if self.stop.wait(max(MIN_PAUSE_S, step)):
                return
            settings = self.settings()
            if self.spec.lock.held:
                try:
                    self.spec.lock.renew(self.spec.lease_ms(settings))
                except redis.RedisError as exc:
                    # Tried again at the next step; Redis failing is what the cycle says, once
                    # (a lease actually lost is logged by the lock when Redis answers again).
                    self.logger.debug("%s: lease not renewed while idle (%s)", self.spec.name, exc)


def stop_on_signals(logger: logging.Logger) -> threading.Event:
    """An event SIGTERM and SIGINT set: the loops finish their cycles and stop."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            logger.info("signal %d: finishing the current cycles", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def run_loops(
    kind: str,
    client: redis.Redis,
    loops: Sequence[LeasedLoop[Any]],
    activity: Activity,
    *,
    grace_s: float = STOP_GRACE_S,
) -> None:
    """Start the process's heartbeat (`kind`, saying what `activity` says) and its loops; return
    once every loop has stopped, or `grace_s` after the stop with those still at it left
    behind (logged), the heartbeat's last beat saying so (within `LAST_BEAT_S`)."""
    heartbeat = Heartbeat(client, kind, activity).start()
    for loop in loops:
        loop.start()
    stopped_at: float | None = None
    while running := [loop for loop in loops if loop.is_alive()]:
        for loop in running:
            loop.join(timeout=0.2)
        if stopped_at is None and any(loop.stop.is_set() for loop in loops):
            stopped_at = time.monotonic()
        if stopped_at is not None and time.monotonic() - stopped_at > grace_s:
            names = ", ".join(loop.spec.name for loop in loops if loop.is_alive())
            if names:
                loops[0].logger.warning(
                    "%s: %s still at work %.0f s after the stop (a server not answering); exiting "
                    "without them: their leases expire by themselves",
                    kind,
                    names,
                    grace_s,
                )
            break
    heartbeat.stop(timeout=LAST_BEAT_S)
