"""The worker's entry module: `dramatiq actors.worker` (the Procfile's worker line runs it
through actors/run_worker.py).

The only module that changes global state when imported, as Dramatiq's CLI expects of
the module it is given: it reads the settings, sets the log format (observability/logs.py),
builds the `RedisListBroker` and sets it as Dramatiq's global broker (actors/bootstrap.py,
whose `ProcessBoot` middleware builds what the actors use once per worker process, after
the fork), makes the worker process absorb a runner's duplicate SIGTERM and bounds its shutdown
once its jobs are done (`ShutdownDeadline`), and declares the
actors on the broker (the report actor, and the admin tasks' actor on the `admin` queue)
with the retry schedule and the report batch size of the settings. Dramatiq imports it in its main process and
again in each worker process.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from dramatiq.compat import StreamablePipe
from listbroker import ShutdownDeadline, debounce_worker_sigterm

from actors import admin_tasks, bootstrap, report
from config.settings import Settings
from observability.logs import configure_logging, inherited_stderr

settings = Settings.from_env()
# Dramatiq has set up (or, run by actors.run_worker, skipped) its logging: the project's
# format, on this process's stderr; in a worker process written straight to the stderr it
# inherited (observability/logs.py, `inherited_stderr`) rather than through Dramatiq's pipe,
# which its main process re-reads and re-writes line by line.
configure_logging(
    "worker",
    level=settings.worker_log_level,
    stream=inherited_stderr() if isinstance(sys.stderr, StreamablePipe) else sys.stderr,
    fmt=settings.log_format,
)
broker = bootstrap.install(settings)
debounce_worker_sigterm()
# This is a worker process of its own: once its jobs are done, its shutdown is bounded (a Redis
# that hangs would hold it for minutes); never added where a worker runs inside a test.
broker.add_middleware(ShutdownDeadline(), before=type(broker.middleware[0]))

_schedule = {"retry_delays": settings.report_retry_delays_ms}
generate_report = replace(
    report.generate_report,
    options={**report.generate_report.options, **_schedule, "batch_size": settings.report_batch_size},
).declare(broker)
regenerate_matching = replace(
    admin_tasks.regenerate_matching, options={**admin_tasks.regenerate_matching.options, **_schedule}
).declare(broker)

__all__ = ["broker", "generate_report", "regenerate_matching"]
