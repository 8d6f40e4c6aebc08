"""`python -m reconciler` (the Procfile's `reconciler` line): the process, built from the settings.

The pass is reconciler/loop.py; it runs on the leased loop of every background process
(background/leased_loop.py).
"""

from __future__ import annotations

import logging
import os

from background.leased_loop import LeasedLoop, run_loops, stop_on_signals
from config.settings import Settings
from observability.heartbeat import Activity
from observability.logs import configure_logging
from reconciler.loop import Reconciler, loop_spec
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
        settings,
        queue_key=keys.report.queue,
        jobs_key=keys.report.jobs,
        events_keys=keys.eventlog,
        events_spool=spool_at(settings.event_spool_dir),
    )
    stop = stop_on_signals(logger)
    logger.info(
        "reconciler running (pid %d): every %d ms, grace %d ms, %d records per page",
        os.getpid(),
        settings.reconcile_interval_ms,
        settings.reconcile_grace_ms,
        settings.reconcile_batch,
    )
    activity = Activity()
    loop = LeasedLoop(loop_spec(reconciler), lambda: settings, stop, activity, logger=logger)
    run_loops("reconciler", client, [loop], activity)
    client.close()
    logger.info("reconciler stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
