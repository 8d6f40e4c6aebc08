"""docs/configuration.md, generated from the settings object (config/settings.py).

    python -m scripts.settings_table            # rewrite docs/configuration.md
    python -m scripts.settings_table --check    # exit 1 when the page differs from what it would write

The first table has a row per `Variable` documenting a field of `Settings`, in the fields'
order; the second the variables only the Procfile's shell, `make run`, the CLI's stack
discovery and the tests read (`TOOLING`, here: they are not the application's settings).
tests/unit/test_settings_table.py keeps the page equal to what this writes.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields
from pathlib import Path

from config.settings import Settings, Variable, documented

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
HEADER = "| variable | default | used by | meaning |\n|---|---|---|---|\n"

INTRO = """\
# Configuration

This page covers every environment variable the product and its tooling read: its default,
which processes read it and what it means. Every process reads its variables once, at
start-up, into the settings object (`config/settings.py`), and refuses to start on a
malformed value. This page is generated from that object (`python -m scripts.settings_table`;
a test keeps them equal): to add a variable, add a field with its documentation there. The
hot path's run-time settings, changed while it runs, are in [hotpath.md](hotpath.md#run-time-settings).

## Read by the processes

"""

TOOLING_INTRO = """
## Read by the Procfile, `make run`, the CLI and the tests

"""

OUTRO = """
## Constants

The report queue's keys and retry schedule are constants in `redis_adapters/queues.py`; the
broker's key layout and defaults are in `broker/src/listbroker/` (`keys.py`, `broker.py`); every
key family in the layout `REDIS_HASH_TAGS` chooses is `Keyspace` in `redis_adapters/keyspace.py`.
Timeouts are constants too: the web tier's Redis client waits 1 s to connect and 1 s for
a reply, then fails fast for 1 s (`web/redis_guard.py`); a new PostgreSQL connection
waits at most 5 s (`services/persistence/db.py`); a 503 says `Retry-After: 5` (`web/errors.py`).
"""

#: The variables read outside the settings object (they need no field: the application never
#: reads them), in the order of the table.
TOOLING: tuple[Variable, ...] = (
    Variable(
        "PORT",
        "web",
        (
            "listen port (Procfile); unset, `make run` takes the previous run's port (`.state/web-port`) "
            "while it is free, else 8000, else a free port (the banner says when it changed); honcho `5000`"
        ),
        default="`8000`",
    ),
    Variable(
        "BIND",
        "web",
        (
            "address gunicorn listens on (Procfile: `${BIND:-127.0.0.1}:${PORT:-8000}`): loopback, for a "
            "proxy on the same host. Set `BIND=0.0.0.0` when the proxy or router is elsewhere, as on "
            "Heroku-style platforms, which route to `$PORT` on every interface"
        ),
        default="`127.0.0.1`",
    ),
    Variable(
        "WEB_CONCURRENCY",
        "web",
        "gunicorn worker processes",
        default="`2`",
    ),
    Variable(
        "WEB_THREADS",
        "web",
        (
            "threads per gunicorn worker process (`gthread`, see "
            "[Processes](deploying.md#processes-procfile)): each request in progress, and each client still "
            "sending its request line and headers, holds one"
        ),
        default="`64`",
    ),
    Variable(
        "WEB_KEEPALIVE_S",
        "web",
        (
            "how long an idle keep-alive connection is kept (it waits in the poller, holding no thread); "
            "keep it below the idle timeout of the proxy in front"
        ),
        default="`5`",
    ),
    Variable(
        "WORKER_PROCESSES",
        "worker",
        (
            "`dramatiq --processes`; 2 processes × 32 threads measured best on 2 cores with batches of 100 "
            "([BENCHMARKS.md](../BENCHMARKS.md#generation-vs-the-batched-limit))"
        ),
        default="`2`",
    ),
    Variable(
        "WORKER_THREADS",
        "worker",
        (
            "`dramatiq --threads`: the calls a process runs at once (a report call takes a batch of up to "
            "`REPORT_BATCH_SIZE` jobs), and its prefetch (2 × threads: the jobs it holds; raised for a fast "
            "actor, to two batches' worth for the report actor); a call waits for a database connection "
            "beyond the pool's `DB_POOL_SIZE + DB_MAX_OVERFLOW`, and one that waits out the pool spends no "
            "attempt"
        ),
        default="`32`",
    ),
    Variable(
        "WORKER_SHUTDOWN_TIMEOUT_MS",
        "worker",
        "how long SIGTERM waits for jobs in flight",
        default="`600000`",
    ),
    Variable(
        "MI_STACK",
        "CLI",
        (
            "the `stack.json` (or state folder) of the `make run` the CLI is to talk to "
            "([Operations](operations.md#the-cli-and-the-api))"
        ),
        default="unset",
    ),
    Variable(
        "MI_STATE_DIR",
        "make run, make demo",
        (
            "where the embedded servers keep their data, the credentials (`secrets.json`: `SECRET_KEY`, "
            "`ADMIN_TOKENS`, `POSTGRES_PASSWORD`, `REDIS_PASSWORD`; 0600), `stack.json` (0600), "
            "`supervisord.conf`, `console.log` and `logs/`"
        ),
        default="`.state`",
    ),
    Variable(
        "MI_STOP_TIMEOUT_S",
        "make run",
        "how long supervisord waits after SIGTERM before it SIGKILLs a process (`stopwaitsecs`)",
        default="`WORKER_SHUTDOWN_TIMEOUT_MS` / 1000 + 10 (610)",
    ),
    Variable(
        "MI_TERMINAL_LOG",
        "make run",
        (
            "what `make run`'s terminal shows: `quiet`, the banner, `ready`, starts and stops of processes, "
            "warnings and errors; `all`, every line of every process, the web's access log included. The "
            "files under `.state/logs/` hold everything either way"
        ),
        default="`quiet`",
    ),
    Variable(
        "MI_ENV_FILE, MI_PROCFILE",
        "make run",
        "another settings file (`/dev/null`: none) or Procfile (the tests add a type to a copy)",
        default="`.env`, `Procfile`",
    ),
    Variable(
        "TEST_DATABASE_URL, TEST_REDIS_URL",
        "tests",
        "servers for the test suite",
        default="see make test",
    ),
    Variable(
        "MI_TEST_PRIVATE_SERVERS",
        "make test",
        (
            "`1`: never reuse the servers on the default ports; start private ones (installed with apt if "
            "absent)"
        ),
        default="unset",
    ),
)


def shown(value: object) -> str:
    """A field's default as the table shows it."""
    if value is True or value is False:  # a flag: 1 or 0, as the environment writes it
        value = int(value)
    if isinstance(value, tuple):
        value = ",".join(str(item) for item in value)
    return f"`{value}`"


def row(variable: Variable, default: object = None) -> str:
    names = ", ".join(f"`{name.strip()}`" for name in variable.names.split(","))
    text = variable.default if variable.default is not None else shown(default)
    return f"| {names} | {text} | {variable.used_by} | {variable.meaning} |\n"


def settings_rows() -> str:
    rows: list[str] = []
    for item in fields(Settings):
        default = item.default if item.default is not MISSING else None
        rows.extend(row(variable, default) for variable in documented(item.name))
    return "".join(rows)


def page() -> str:
    tooling = "".join(row(variable) for variable in TOOLING)
    return INTRO + HEADER + settings_rows() + TOOLING_INTRO + HEADER + tooling + OUTRO


def main(argv: list[str]) -> int:
    generated = page()
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != generated:
            print("docs/configuration.md differs from config/settings.py")
            print("rewrite it: python -m scripts.settings_table")
            return 1
        return 0
    PAGE.write_text(generated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
