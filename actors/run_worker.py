"""`python -m actors.run_worker [dramatiq options]`: `dramatiq actors.worker` with this project's logs.

The Procfile's worker line. Dramatiq's command line gives its main process and its worker
processes a log format of its own; this runs the same command line (`dramatiq.cli.main`)
with `--skip-logging`, after giving the main process the format of observability/logs.py
(`LOG_FORMAT=json` for JSON lines); actors.worker does the same in each worker process.
Every option is Dramatiq's (`--processes`, `--threads`, `--worker-shutdown-timeout` ...).
"""

from __future__ import annotations

import sys

from actors import lifetime
from config.settings import Settings, default_dramatiq_restart_delay
from observability.logs import configure_logging

#: The module Dramatiq imports in each worker process.
WORKER_MODULE = "actors.worker"


def main(argv: list[str] | None = None) -> int:
    default_dramatiq_restart_delay()  # before Dramatiq is imported: it reads the variable then
    from dramatiq.cli import main as dramatiq_main  # noqa: PLC0415
    from dramatiq.cli import make_argument_parser  # noqa: PLC0415

    settings = Settings.from_env()
    configure_logging("worker", level=settings.worker_log_level, fmt=settings.log_format)
    lifetime.remember_main_process()  # its worker processes, forked, die with it
    args = sys.argv[1:] if argv is None else argv
    parsed = make_argument_parser().parse_args([WORKER_MODULE, "--skip-logging", *args])
    code: int = dramatiq_main(parsed)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
