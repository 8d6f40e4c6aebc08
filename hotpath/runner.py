"""The hot-path process: the answers, progress, event-log and retention loops.

``python -m hotpath`` (the Procfile's `hotpath` line) runs each loop in a thread of its own
(background/leased_loop.py, the skeleton every background loop runs on), so one slow loop
never delays the others. Each re-reads the run-time settings every cycle
(hotpath/runtime_settings.py), survives Redis and database errors and bad data (set aside,
see hotpath/dirty.py and eventlog_consumer.py), keeps its lease alive, and on SIGTERM or
SIGINT finishes the cycle it is in, releases its lease (a standby takes over at once) and stops.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence

import redis
from sqlalchemy.orm import Session, sessionmaker

from background.leased_loop import LeasedLoop, LoopSpec, run_loops, stop_on_signals
from config.settings import Settings
from hotpath.answers_flusher import AnswersFlusher
from hotpath.dirty import DirtySetFlusher
from hotpath.eventlog_consumer import EventLogConsumer
from hotpath.progress_flusher import ProgressFlusher
from hotpath.retention_loop import RetentionJob, invalid_lists
from hotpath.runtime_settings import HotpathSettings, SettingsSource
from observability.heartbeat import Activity
from observability.logs import configure_logging
from redis_adapters.keyspace import Keyspace
from redis_adapters.redis_clients import redis_client
from services.persistence.db import build_session_factory

logger = logging.getLogger("hotpath")

LOOP_NAMES = ("answers", "progress", "events", "retention")


def _spec(
    name: str,
    cycle: Callable[[HotpathSettings], bool],
    interval_ms: Callable[[HotpathSettings], int],
    job: DirtySetFlusher | EventLogConsumer | RetentionJob,
    doing: str,
) -> LoopSpec[HotpathSettings]:
    """A hot-path loop: its lease lives `lock_ttl_ms`, its failures are "hot path NAME loop"'s."""
    return LoopSpec(
        name,
        cycle,
        interval_ms,
        lambda s: s.lock_ttl_ms,
        job.lock,
        job.close,
        doing=doing,
        what=f"hot path {name} loop",
    )


def _flush(
    flusher: DirtySetFlusher,
    batch: Callable[[HotpathSettings], int],
    interval_ms: Callable[[HotpathSettings], int],
) -> LoopSpec[HotpathSettings]:
    """A dirty-set flusher's loop (answers, progress)."""

    def flush(s: HotpathSettings) -> bool:
        # A cycle takes every dirty record: what is marked meanwhile waits for the next.
        flusher.run_once(batch=batch(s), lock_ttl_ms=s.lock_ttl_ms)
        return False

    return _spec(flusher.name, flush, interval_ms, flusher, f"flushing {flusher.name}")


def build_loops(
    client: redis.Redis,
    factory: sessionmaker[Session],
    names: Sequence[str] = LOOP_NAMES,
    keyspace: Keyspace | None = None,
    settings: Settings | None = None,
) -> list[LoopSpec[HotpathSettings]]:
    """The specs of the loops `names`, on the hot path's run-time settings."""
    keyspace = keyspace or Keyspace.of()
    specs: list[LoopSpec[HotpathSettings]] = []
    if "answers" in names:
        answers = AnswersFlusher(client, factory, keys=keyspace.autosave)
        specs.append(_flush(answers, lambda s: s.answers_batch, lambda s: s.answers_interval_ms))
    if "progress" in names:
        progress = ProgressFlusher(client, factory, keys=keyspace.autosave)
        specs.append(_flush(progress, lambda s: s.progress_batch, lambda s: s.progress_interval_ms))
    if "events" in names:
        events = EventLogConsumer(client, factory, keys=keyspace.eventlog)

        def consume(s: HotpathSettings) -> bool:
            report = events.run_once(batch=s.events_batch, lock_ttl_ms=s.lock_ttl_ms)
            # A full batch (or a replay) means more may be waiting: go again without pausing.
            return report.owner and (report.replayed or report.taken >= s.events_batch)

        specs.append(_spec("events", consume, lambda s: s.events_interval_ms, events, "consuming events"))
    if "retention" in names:
        job = RetentionJob(client, factory, settings, invalid_keys=invalid_lists(keyspace))

        def retain(s: HotpathSettings) -> bool:
            job.run_once(lock_ttl_ms=s.lock_ttl_ms)
            return False

        specs.append(
            _spec("retention", retain, lambda s: job.settings.hotpath_retention_interval_ms, job, "retention")
        )
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
    stop = stop_on_signals(logger)
    source = SettingsSource(client, key=keyspace.hotpath_settings, env=settings.hotpath_env())
    activity = Activity()
    specs = build_loops(client, build_session_factory(settings), args.only, keyspace, settings)
    loops = [LeasedLoop(spec, source.read, stop, activity, logger=logger) for spec in specs]
    logger.info("hotpath running: %s (pid %d)", ", ".join(args.only), os.getpid())
    run_loops("hotpath", client, loops, activity)
    client.close()
    logger.info("hotpath stopped")
    return 0
