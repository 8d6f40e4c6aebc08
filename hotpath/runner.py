"""The hot-path process: the answer flusher, the progress flusher and the event-log consumer.

``python -m hotpath`` (the Procfile's `hotpath` line) runs each loop in a thread
of its own, so one slow loop never delays the others. A loop re-reads its settings every
cycle, survives Redis and database errors (retried with backoff, logged once, then a
summary while they last, then the recovery: broker/src/listbroker/backoff.py) and bad data (set
aside, see hotpath/dirty.py and eventlog.py), keeps its lease alive while it works
(lock.RedisLock.kept_alive) and while it sleeps, and on SIGTERM or SIGINT finishes the
cycle it is in, releases its lease (a standby takes over at once) and stops.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

import redis
from listbroker import Backoff
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from hotpath.answers_flusher import AnswersFlusher
from hotpath.eventlog_consumer import EventLogConsumer
from hotpath.progress_flusher import ProgressFlusher
from hotpath.retention_loop import RetentionJob, RetentionSettings, invalid_lists
from hotpath.runtime_settings import HotpathSettings, SettingsSource
from observability.heartbeat import Activity, Heartbeat
from observability.logs import configure_logging, outage
from redis_adapters.keyspace import Keyspace
from redis_adapters.lock import RedisLock
from redis_adapters.redis_clients import redis_client
from services.persistence.db import build_session_factory

logger = logging.getLogger("hotpath")

LOOP_NAMES = ("answers", "progress", "events", "retention")

#: Shortest pause after a cycle, whatever the settings say (keeps a failing loop from spinning).
MIN_PAUSE_S = 0.01
#: Longest sleep between two looks at the settings (and lease renewals) while idle.
MAX_IDLE_STEP_S = 1.0
#: After a failed cycle a loop pauses this long, doubling while its cycles fail, at most
#: FAILED_MAX_PAUSE_S, whatever its interval: a loop of a long interval (retention) that
#: failed tries again within seconds, not an interval later, and a fast loop does not spin.
FAILED_FIRST_PAUSE_S = 1.0
FAILED_MAX_PAUSE_S = 15.0


@dataclass(frozen=True)
class LoopSpec:
    name: str
    #: One cycle; True when there is more to do at once (a full batch was taken).
    cycle: Callable[[HotpathSettings], bool]
    interval_ms: Callable[[HotpathSettings], int]
    lock: RedisLock
    close: Callable[[], None]


#: What each loop is doing during a cycle, as the process heartbeat says it.
DOING = {"answers": "flushing answers", "progress": "flushing progress", "events": "consuming events"}


class Loop(threading.Thread):
    def __init__(
        self,
        spec: LoopSpec,
        source: SettingsSource,
        stop: threading.Event,
        activity: Activity | None = None,
    ) -> None:
        super().__init__(name=f"hotpath-{spec.name}")
        self.spec = spec
        self.source = source
        self.stop = stop
        self.activity = activity
        self.cycles = 0
        self.backoff = Backoff(
            f"hot path {spec.name} loop", logger, first_s=FAILED_FIRST_PAUSE_S, max_s=FAILED_MAX_PAUSE_S
        )

    @property
    def failures(self) -> int:
        """Cycles failed in a row (0 while the loop works)."""
        return self.backoff.attempts

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                settings = self.source.read()
                more = self._cycle(settings)
                if not more:
                    self._pause(settings, at_least_s=self.backoff.delay)
        finally:
            self.spec.close()
            logger.info("%s: stopped after %d cycle(s)", self.spec.name, self.cycles)

    def _cycle(self, settings: HotpathSettings) -> bool:
        self.cycles += 1
        token = self.activity.begin(DOING.get(self.spec.name, self.spec.name)) if self.activity else None
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

    def _pause(self, settings: HotpathSettings, *, at_least_s: float = 0.0) -> None:
        """Sleep one interval, or `at_least_s` instead when it is set (a failing loop's
        backoff), in short steps: renew the lease (it must not lapse while idle) and re-read
        the settings at each step, so a shortened interval takes effect at once."""
        started = time.monotonic()
        while not self.stop.is_set():
            wanted = at_least_s if at_least_s else self.spec.interval_ms(settings) / 1000
            pause = max(MIN_PAUSE_S, wanted)
            remaining = started + pause - time.monotonic()
            if remaining <= 0:
                return
            # Short steps while healthy (a new interval takes effect at once); while failing,
            # only as often as the lease needs renewing.
            renew_every_s = settings.lock_ttl_ms / 3000
            step = min(remaining, renew_every_s if at_least_s else MAX_IDLE_STEP_S, renew_every_s)
            if self.stop.wait(max(MIN_PAUSE_S, step)):
                return
            settings = self.source.read()
            if self.spec.lock.held:
                try:
                    self.spec.lock.renew(settings.lock_ttl_ms)
                except redis.RedisError as exc:
                    # Tried again at the next step; Redis failing is what the cycle says, once
                    # (a lease actually lost is logged by the lock when Redis answers again).
                    logger.debug("%s: lease not renewed while idle (%s)", self.spec.name, exc)


def build_loops(
    client: redis.Redis,
    factory: sessionmaker[Session],
    names: Sequence[str] = LOOP_NAMES,
    keyspace: Keyspace | None = None,
    settings: Settings | None = None,
) -> list[LoopSpec]:
    keyspace = keyspace or Keyspace.of()
    specs: list[LoopSpec] = []
    if "answers" in names:
        answers = AnswersFlusher(client, factory, keys=keyspace.autosave)

        def flush_answers(s: HotpathSettings) -> bool:
            # A cycle takes every dirty record: what is marked meanwhile waits for the next.
            answers.run_once(batch=s.answers_batch, lock_ttl_ms=s.lock_ttl_ms)
            return False

        specs.append(
            LoopSpec("answers", flush_answers, lambda s: s.answers_interval_ms, answers.lock, answers.close)
        )
    if "progress" in names:
        progress = ProgressFlusher(client, factory, keys=keyspace.autosave)

        def flush_progress(s: HotpathSettings) -> bool:
            progress.run_once(batch=s.progress_batch, lock_ttl_ms=s.lock_ttl_ms)
            return False

        specs.append(
            LoopSpec(
                "progress", flush_progress, lambda s: s.progress_interval_ms, progress.lock, progress.close
            )
        )
    if "events" in names:
        events = EventLogConsumer(client, factory, keys=keyspace.eventlog)

        def consume(s: HotpathSettings) -> bool:
            report = events.run_once(batch=s.events_batch, lock_ttl_ms=s.lock_ttl_ms)
            # A full batch (or a replay) means more may be waiting: go again without pausing.
            return report.owner and (report.replayed or report.taken >= s.events_batch)

        specs.append(LoopSpec("events", consume, lambda s: s.events_interval_ms, events.lock, events.close))
    if "retention" in names:
        retention = RetentionSettings.of(settings) if settings is not None else None
        job = RetentionJob(client, factory, retention, invalid_keys=invalid_lists(keyspace))

        def retain(s: HotpathSettings) -> bool:
            job.run_once(lock_ttl_ms=s.lock_ttl_ms)
            return False

        specs.append(LoopSpec("retention", retain, lambda s: job.settings.interval_ms, job.lock, job.close))
    return specs


def parse(argv: Sequence[str] | None, default_level: str = "INFO") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hotpath", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only",
        default=",".join(LOOP_NAMES),
        help=f"comma-separated loops to run (default: {','.join(LOOP_NAMES)})",
    )
    parser.add_argument("--log-level", default=default_level, help="default: HOTPATH_LOG_LEVEL, else INFO")
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(args.only) - set(LOOP_NAMES)
    if unknown or not args.only:
        parser.error(f"--only takes some of {', '.join(LOOP_NAMES)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The hot path's composition root: settings, one Redis client, one session factory, the loops."""
    settings = Settings.from_env()
    args = parse(argv, settings.hotpath_log_level)
    configure_logging("hotpath", level=args.log_level, fmt=settings.log_format)
    client = redis_client(
        settings.redis_url, socket_timeout=30, socket_connect_timeout=5, health_check_interval=30
    )
    keyspace = Keyspace.of(settings.redis_hash_tags)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            logger.info("signal %d: finishing the current cycles", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    source = SettingsSource(client, key=keyspace.hotpath_settings, env=settings.hotpath_env())
    activity = Activity()
    specs = build_loops(client, build_session_factory(settings), args.only, keyspace, settings)
    loops = [Loop(spec, source, stop, activity) for spec in specs]
    heartbeat = Heartbeat(client, "hotpath", activity).start()
    for loop in loops:
        loop.start()
    logger.info("hotpath running: %s (pid %d)", ", ".join(args.only), os.getpid())
    while any(loop.is_alive() for loop in loops):
        for loop in loops:
            loop.join(timeout=0.2)
    heartbeat.stop()
    client.close()
    logger.info("hotpath stopped")
    return 0
