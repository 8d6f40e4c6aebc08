"""The worker's entry module: `dramatiq actors.worker` (the Procfile's worker line).

The only module that changes global state when imported, as Dramatiq's CLI expects of
the module it is given: it sets the log format (observability/logs.py), builds the
`RedisListBroker` from REDIS_URL and sets it as
Dramatiq's global broker, makes the worker process absorb a runner's duplicate SIGTERM,
and declares the actors on the broker (the report actor, and the admin tasks' actor on
the `admin` queue). Dramatiq imports it in its main process and
again in each worker process.
"""

from __future__ import annotations

import os
import sys

from listbroker import debounce_worker_sigterm

from actors import admin_tasks, report
from actors.bootstrap import install
from observability.logs import configure_logging

# Dramatiq has set up (or, run by actors.run_worker, skipped) its logging: the project's
# format, written to this process's stderr, which Dramatiq pipes to its main process.
configure_logging("worker", level=os.environ.get("WORKER_LOG_LEVEL", "INFO"), stream=sys.stderr)
broker = install()
debounce_worker_sigterm()

generate_report = report.generate_report.declare(broker)
regenerate_matching = admin_tasks.regenerate_matching.declare(broker)

__all__ = ["broker", "generate_report", "regenerate_matching"]
