"""One logging setup for every process: plain text for a terminal, or JSON lines.

`LOG_FORMAT=json` makes every record one JSON object on one line (python-json-logger:
a maintained formatter, no hand-written escaping): `time` (ISO 8601, UTC), `level`, `logger`, `message`,
`process_kind`, `pid`, `thread`, and, inside a worker's job, `message_id` and
`record_id`; a traceback is the string field `exc_info` of the same line. Anything
else (unset, `text`) keeps plain text, one format for all processes, with the job's
ids in the line when there is a job; tracebacks then follow on their own lines, as a
terminal reader expects.

`outage(exc)` tells an error that says a server is unreachable (logged as one line) from
one that deserves its traceback.

The job's ids come from `job_context`, which the worker's observer sets around each job
(observability/job_observer.py), so every line a job logs, in any module, carries them.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
from collections.abc import Mapping
from typing import NamedTuple, TextIO

import psycopg
import redis
import sqlalchemy.exc
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from config import settings
from services.domain.errors import DatabaseUnavailable
from services.domain.limits import escape_controls

#: Errors that say a server (Redis, PostgreSQL) cannot be reached or failed: an outage,
#: not a bug, so a failing loop logs them on one line, without a traceback.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    DatabaseUnavailable,
    redis.RedisError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg.OperationalError,
)


def readable(raw: bytes | str, limit: int = 200) -> str:
    """Stored bytes for a log line, quoted: UTF-8 as text (Chinese stays Chinese), any other
    byte as \\xNN, control characters escaped (one line stays one line), cut after `limit`
    characters with "…"; never Python's `b'…'`."""
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "backslashreplace")
    return f"“{escape_controls(text[:limit])}{'…' if len(text) > limit else ''}”"


def outage(exc: BaseException) -> bool:
    """Whether `exc` is a server being unreachable or failing (OUTAGE_ERRORS) rather than a bug."""
    return isinstance(exc, OUTAGE_ERRORS)


TEXT_FORMAT = "%(asctime)s %(levelname)s [%(process_kind)s %(process)d] %(name)s: %(message)s%(job)s"
JSON_FIELDS = ("levelname", "name", "message", "process_kind", "process", "threadName")
JSON_RENAMES = {
    "levelname": "level",
    "name": "logger",
    "process": "pid",
    "threadName": "thread",
}


class JobContext(NamedTuple):
    """The ids a job's log lines carry (a tuple: one is made for every job, a batch's included)."""

    message_id: str
    record_id: int | None


#: The job the current thread runs (None outside a job).
job_context: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("job_context", default=None)


def log_format(env: Mapping[str, str] | None = None) -> str:
    """LOG_FORMAT (config/settings.py checks it): of `env`, or of this process's environment."""
    return settings.log_format(settings.environment() if env is None else env)


class ContextFilter(logging.Filter):
    """Adds the process kind and the current job's ids to every record."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def filter(self, record: logging.LogRecord) -> bool:
        record.process_kind = self.kind
        job = job_context.get()
        if job is not None:
            record.message_id = job.message_id
            if job.record_id is not None:
                record.record_id = job.record_id
        # The text format's suffix; JSON carries the ids as fields instead.
        record.job = "" if job is None else _job_suffix(job)
        return True


def _job_suffix(job: JobContext) -> str:
    """` [message 1a2b… record 42]`; a job with no record (unreadable) names its message only."""
    record = "" if job.record_id is None else f" record {job.record_id}"
    return f" [message {job.message_id}{record}]"


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter(
            list(JSON_FIELDS),
            rename_fields=JSON_RENAMES,
            timestamp="time",  # ISO 8601 in UTC, first in the line
            json_ensure_ascii=False,
            # `job` is the text format's suffix: JSON has the ids as fields.
            reserved_attrs=[*RESERVED_ATTRS, "job"],
        )
    return logging.Formatter(TEXT_FORMAT)


def inherited_stderr() -> TextIO:
    """File descriptor 2 as this process inherited it, whatever `sys.stderr` was replaced with.

    A Dramatiq worker process's `sys.stderr` is a pipe its main process reads and writes out
    again, a record at a time: ~0.05 ms of the main process's CPU per report line.
    Its lines can go to the same place directly instead. Each record is one write (the
    handler flushes it whole), and a write of up to PIPE_BUF bytes (4,096 on Linux) to a
    pipe is never interleaved with another process's, so lines do not mingle; a longer
    record (a traceback) could, as with any processes sharing a stderr.
    """
    return os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace", buffering=65536)


def configure_logging(
    kind: str,
    *,
    level: str | int | None = None,
    env: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    fmt: str | None = None,
) -> None:
    """Give the root logger's handlers (one on stderr if it has none) this project's format.

    Keeps handlers a framework installed (Dramatiq's pipe to its parent process), and
    replaces only their formatter, so output still goes where the framework sends it.
    `stream`: where stream handlers write from now on (a forked Dramatiq worker process
    inherits its parent's handler but must write to its own `sys.stderr`, the pipe).
    """
    fmt = fmt or log_format(env)
    # Neither format names the caller's file, line or function: not looking them up spares a
    # walk up the stack per record (the logging HOWTO's "Optimization"; a worker logs a line
    # per report). Nor the multiprocessing process's name.
    logging._srcfile = None
    logging.logMultiprocessing = False
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(stream or sys.stderr))
    elif stream is not None:
        for handler in root.handlers:
            if type(handler) is logging.StreamHandler:
                handler.setStream(stream)
    if level is not None:
        root.setLevel(level.upper() if isinstance(level, str) else level)
    context = ContextFilter(kind)
    for handler in root.handlers:
        handler.setFormatter(formatter(fmt))
        for old in [f for f in handler.filters if isinstance(f, ContextFilter)]:
            handler.removeFilter(old)
        handler.addFilter(context)
