"""`python -m reconciler` (the Procfile's `reconciler` line): the process, built from the settings.

The loop itself is reconciler/loop.py.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

from config.settings import Settings
from observability.heartbeat import Activity, Heartbeat
from observability.logs import configure_logging
from reconciler.loop import Reconciler, ReconcilerSettings, run
from redis_adapters.event_spool import spool_at
from redis_adapters.keyspace import Keyspace
from redis_adapters.redis_clients import redis_client
from services.persistence.db import build_session_factory

logger = logging.getLogger("reconciler")


def main() -> int:
    """The reconciler's composition root: settings, one Redis client, one session factory."""
    settings = Settings.from_env()
    configure_logging("reconciler", level=settings.reconcile_log_level, fmt=settings.log_format)
    client = redis_client(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    keys = Keyspace.of(settings.redis_hash_tags)
    reconciler = Reconciler(
        client,
        build_session_factory(settings),
        ReconcilerSettings.of(settings),
        queue_key=keys.report.queue,
        jobs_key=keys.report.jobs,
        events_keys=keys.eventlog,
        events_queue_max=settings.event_log_queue_max,
        events_spool=spool_at(settings.event_spool_dir),
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    s = reconciler.settings
    logger.info(
        "reconciler running (pid %d): every %d ms, grace %d ms, %d records per page",
        os.getpid(),
        s.interval_ms,
        s.grace_ms,
        s.batch,
    )
    activity = Activity()
    heartbeat = Heartbeat(client, "reconciler", activity).start()
    run(reconciler, stop, activity)
    heartbeat.stop()
    client.close()
    logger.info("reconciler stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
