"""`python -m actors.run_worker [dramatiq options]`: `dramatiq actors.worker` with this project's logs.

The Procfile's worker line. Dramatiq's command line gives its main process and its worker
processes a log format of its own; this runs the same command line (`dramatiq.cli.main`)
with `--skip-logging`, after giving the main process the format of observability/logs.py
(`LOG_FORMAT=json` for JSON lines); actors.worker does the same in each worker process.
Every option is Dramatiq's (`--processes`, `--threads`, `--worker-shutdown-timeout` ...).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from dramatiq.cli import main as dramatiq_main
from dramatiq.cli import make_argument_parser

from config.settings import Settings
from observability.logs import configure_logging

#: The module Dramatiq imports in each worker process.
WORKER_MODULE = "actors.worker"
#: The main process's pid, in the environment its worker processes inherit.
MAIN_PID_ENV = "MI_WORKER_MAIN_PID"
PR_SET_PDEATHSIG = 1


def die_with_main_process() -> None:
    """In a worker process: be SIGKILLed when the main process dies, as a SIGKILL of the whole
    group would (its jobs in flight come back through the reaper, counting a delivery).
    Without it a worker process outlives a main process killed alone (the OOM killer, an
    operator): unsupervised, next to the one supervisord starts again, still taking jobs,
    its output read by no one (found by the soak, bench/soak.py). Nothing outside run_worker."""
    main_pid = os.environ.get(MAIN_PID_ENV, "")
    if not main_pid.isdigit() or int(main_pid) == os.getpid():
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(main_pid):  # it died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    settings = Settings.from_env()
    configure_logging("worker", level=settings.worker_log_level, fmt=settings.log_format)
    os.environ[MAIN_PID_ENV] = str(os.getpid())  # for die_with_main_process, in each worker process
    args = sys.argv[1:] if argv is None else argv
    parsed = make_argument_parser().parse_args([WORKER_MODULE, "--skip-logging", *args])
    code: int = dramatiq_main(parsed)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
