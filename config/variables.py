"""Every variable the project reads, documented: the rows of README's configuration table.

Each `Variable` names the `Settings` field that holds it (config/settings.py), or none for
what the Procfile's shell, `make run`, Dramatiq or the tests read. `configuration_table()`
renders README's table (`python -m scripts.settings_table` writes it; a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One row of README's configuration table: a variable (or a few read together), its
    default, who reads it and what it means; `field` names the `Settings` field holding it
    (None: read by the Procfile's shell, `make run`, Dramatiq or the tests, or by the CLI's stack
    discovery before it has any settings: web/cli_stack.py)."""

    names: str
    default: str
    used_by: str
    meaning: str
    field: str | None = None

    def row(self) -> str:
        return f"| {self.names} | {self.default} | {self.used_by} | {self.meaning} |"


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "`DATABASE_URL`",
        "`postgresql://postgres@127.0.0.1:5432/mi_assessment`",
        "all",
        (
            "PostgreSQL (psycopg 3 is used for `postgresql://`); a password goes in it: "
            "`postgresql://USER:PASSWORD@HOST:PORT/DB`. Unset, `make run` starts its own and sets it "
            "(with the password of `.state/secrets.json`)"
        ),
        field="database_url",
    ),
    Variable(
        "`REDIS_URL`",
        "`redis://127.0.0.1:6379/0`",
        "all",
        (
            "Redis ≥ 6.2; a password goes in it: `redis://default:PASSWORD@HOST:PORT/0` (`default` is "
            "Redis's own user: `redis-cli -u` needs a user name, redis-py does not; an ACL user: "
            "`redis://USER:PASSWORD@…`). Unset, `make run` starts its own and sets it. Behind Redis "
            "Sentinel: "
            "`redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE_NAME[/DB][?sentinel_password=…]` "  # noqa: E501
            "— the Sentinels (port 26379 when left out), the master's name in their configuration, the "
            "master's password (redis-py's `Sentinel` conventions); every process follows a failover (see "
            "[scaling](scaling.md#redis-sentinel)). A malformed URL is refused at start-up"
        ),
        field="redis_url",
    ),
    Variable(
        "`REDIS_URL=redis+cluster://…`",
        "—",
        "all",
        (
            "a Redis Cluster: `redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]` (some of its "
            "masters; the client finds the rest and follows slot moves; database 0 only). Every process "
            "then uses redis-py's `RedisCluster`, and `REDIS_HASH_TAGS` is on. See "
            "[cluster](cluster.md)"
        ),
    ),
    Variable(
        "`REDIS_HASH_TAGS`",
        "`0` (`1` with a `redis+cluster://` URL)",
        "all",
        (
            "`1`: every key hash-tagged, one slot per queue and per hot-path family: `{report}:queue`, "
            "`{report}:queue:dead`, `{report}:queue:heartbeats`, `{hotpath}:answers:<id>`, "
            "`{eventlog}:queue`… The default keeps the original names (`report:queue`, "
            "`report:queue:dead`, `broker:heartbeats`, `hotpath:…`, `eventlog:…`), which the .NET "
            "producer uses. All processes must agree; switching drops nothing only on an empty Redis (see "
            "docs/cluster.md)"
        ),
        field="redis_hash_tags",
    ),
    Variable(
        "`SECRET_KEY`",
        "— (user API and console refuse calls)",
        "web",
        (
            "signs user tokens and the admin console's session cookie; at least 32 bytes with "
            "`APP_ENV=production`"
        ),
        field="secret_key",
    ),
    Variable(
        "`ADMIN_TOKENS`",
        "— (admin API refuses calls)",
        "web",
        "comma-separated admin bearer tokens; each at least 32 bytes with `APP_ENV=production`",
        field="admin_tokens",
    ),
    Variable(
        "`ADMIN_TIMEZONE`",
        "`Asia/Shanghai`",
        "web, CLI",
        "IANA zone in which an admin's date/time without an offset is read",
        field="admin_timezone",
    ),
    Variable(
        "`TRUSTED_PROXIES`",
        "`0`",
        "web",
        (
            "how many proxies in front of the web process append to `X-Forwarded-For` / "
            "`X-Forwarded-Proto`: Werkzeug's `ProxyFix(x_for=N, x_proto=N)` then takes the client address "
            "(what the console's sign-in limit counts) and the scheme from them. `0`: the headers are "
            "ignored. Set it only when the web port is reachable through the proxy alone "
            "([security](security.md))"
        ),
        field="trusted_proxies",
    ),
    Variable(
        "`APP_ENV`",
        "`development`",
        "web",
        (
            "`production`, `development` or `test` (anything else is refused). With `production` the web "
            "app refuses to start (`ConfigError`, in gunicorn's log) when `SECRET_KEY` or any admin token "
            "is shorter than 32 bytes; elsewhere that is a warning. Make one with `python -c 'import "
            "secrets; print(secrets.token_urlsafe(32))'`"
        ),
        field="app_env",
    ),
    Variable(
        "`DISPLAY_TIMEZONE`",
        "`Asia/Shanghai`",
        "web",
        (
            "the IANA time zone of the times users read on pages (the API's JSON carries offsets and is "
            "unaffected); an unknown zone is refused at start"
        ),
        field="display_timezone",
    ),
    Variable(
        "`FLASK_RUN_FROM_CLI`",
        "set by Flask",
        "web, CLI",
        "`true` when Flask's command line (`flask --app web …`) builds the app: the warnings meant for "
        "a server starting up (an empty `SECRET_KEY` or `ADMIN_TOKENS`) are left out",
        field="serving",
    ),
    Variable(
        "`DB_POOL_SIZE`",
        "`5`",
        "all",
        (
            "SQLAlchemy pool size per process (`DB_MAX_OVERFLOW` more under load); web threads beyond "
            "both wait for a connection. Connections a deployment needs: see "
            "[scaling](scaling.md#postgresql-connections-and-pgbouncer)"
        ),
        field="db_pool_size",
    ),
    Variable(
        "`DB_MAX_OVERFLOW`",
        "`DB_POOL_SIZE`",
        "all",
        (
            "connections opened beyond the pool under load, closed when given back (`0`: never more than "
            "the pool)"
        ),
        field="db_max_overflow",
    ),
    Variable(
        "`DB_TRANSACTION_POOLING`",
        "`0`",
        "all",
        (
            "`1` when `DATABASE_URL` points at PgBouncer in `pool_mode = transaction`: psycopg prepares "
            "no statement on the server (`prepare_threshold=None`; PgBouncer before 1.21 cannot follow "
            "them) and no setting is sent at connect. Migrations (the `release` step) should reach "
            "PostgreSQL directly"
        ),
        field="db_transaction_pooling",
    ),
    Variable(
        "`EVENT_LOG_RETENTION_DAYS`",
        "`180`",
        "hotpath",
        "event-log months wholly older than this are detached and dropped (at least 31)",
        field="event_log_retention_days",
    ),
    Variable(
        "`EVENT_LOG_QUEUE_MAX`",
        "`500000`",
        "web, worker, reconciler",
        (
            "most entries `eventlog:queue` holds; past it (the hot path stopped or behind) events are "
            "written to PostgreSQL directly, none lost"
        ),
        field="event_log_queue_max",
    ),
    Variable(
        "`DELETED_RECORD_PURGE_DAYS`",
        "`30`",
        "hotpath",
        "answers and reports of records soft-deleted longer ago are deleted (the record row stays)",
        field="deleted_record_purge_days",
    ),
    Variable(
        "`HOTPATH_RETENTION_INTERVAL_MS`",
        "`3600000`",
        "hotpath",
        "pause between two retention cycles",
        field="hotpath_retention_interval_ms",
    ),
    Variable(
        "`HOTPATH_INVALID_KEEP`",
        "`100000`",
        "hotpath",
        (
            "newest entries kept in each set-aside list (`hotpath:answers:invalid`, "
            "`hotpath:progress:invalid`, `eventlog:invalid`); older ones are dropped with a warning"
        ),
        field="hotpath_invalid_keep",
    ),
    Variable(
        "`PORT`",
        "`8000`",
        "web",
        (
            "listen port (Procfile); unset, `make run` takes the previous run's port (`.state/web-port`) "
            "while it is free, else 8000, else a free port (the banner says when it changed); honcho `5000`"
        ),
    ),
    Variable(
        "`BIND`",
        "`127.0.0.1`",
        "web",
        (
            "address gunicorn listens on (Procfile: `${BIND:-127.0.0.1}:${PORT:-8000}`): loopback, for a "
            "proxy on the same host. Set `BIND=0.0.0.0` when the proxy or router is elsewhere, as on "
            "Heroku-style platforms, which route to `$PORT` on every interface"
        ),
    ),
    Variable(
        "`WEB_CONCURRENCY`",
        "`2`",
        "web",
        "gunicorn worker processes",
    ),
    Variable(
        "`WEB_THREADS`",
        "`64`",
        "web",
        (
            "threads per gunicorn worker process (`gthread`, see [Processes](deploying.md#processes-procfile)): each "
            "request in progress, and each client still sending its request line and headers, holds one"
        ),
    ),
    Variable(
        "`WEB_KEEPALIVE_S`",
        "`5`",
        "web",
        (
            "how long an idle keep-alive connection is kept (it waits in the poller, holding no thread); "
            "keep it below the idle timeout of the proxy in front"
        ),
    ),
    Variable(
        "`WORKER_PROCESSES`",
        "`2`",
        "worker",
        (
            "`dramatiq --processes`; 2 × 8 measured best of 2×8, 2×4, 2×2, 4×2, 4×1 on 2 cores before "
            "group commit, 2 × 16 after it, 2 × 64 with issue 24's group commit, 2 × 32 with its batches of "
            "100 (../BENCHMARKS.md, benchmarks 8 and 12)"
        ),
    ),
    Variable(
        "`WORKER_THREADS`",
        "`32`",
        "worker",
        (
            "`dramatiq --threads`: the calls a process runs at once (a report call takes a batch of up to "
            "`REPORT_BATCH_SIZE` jobs), and its prefetch (2 × threads: the jobs it holds; raised for a "
            "fast actor, to two batches' worth for the report actor); a call waits for "
            "a database connection beyond the pool's `DB_POOL_SIZE + DB_MAX_OVERFLOW`, and one that waits "
            "out the pool spends no attempt"
        ),
    ),
    Variable(
        "`WORKER_SHUTDOWN_TIMEOUT_MS`",
        "`600000`",
        "worker",
        "how long SIGTERM waits for jobs in flight",
    ),
    Variable(
        "`BROKER_HEARTBEAT_TIMEOUT_MS`",
        "`60000`",
        "worker",
        "silence after which a worker's jobs are returned to the queue",
        field="broker_heartbeat_timeout_ms",
    ),
    Variable(
        "`REPORT_RETRY_DELAYS_MS`",
        "unset (`10000,30000,60000`)",
        "worker",
        (
            "the retry schedule, three delays in ms; for tests and drills only (the .NET clients expect "
            "the default)"
        ),
        field="report_retry_delays_ms",
    ),
    Variable(
        "`REPORT_BATCH_SIZE`",
        "`100`",
        "worker",
        (
            "most report jobs a worker thread takes in one call and generates in one transaction (of those "
            "its process holds: a trickle runs one by one, with no wait for a batch to fill); each job is "
            "still acknowledged, retried on its own schedule and dead-lettered alone. `1`: one job per "
            "call and per transaction (for tests and diagnosis: 0.44 × the rate, ../BENCHMARKS.md benchmark 12)"
        ),
        field="report_batch_size",
    ),
    Variable(
        "`RECONCILE_INTERVAL_MS`",
        "`10000`",
        "reconciler",
        "pause between two passes",
        field="reconcile_interval_ms",
    ),
    Variable(
        "`RECONCILE_GRACE_MS`",
        "`30000`",
        "reconciler",
        "how long a record stays in status 3, unchanged, before a missing job counts as lost",
        field="reconcile_grace_ms",
    ),
    Variable(
        "`RECONCILE_BATCH`",
        "`1000`",
        "reconciler",
        "records per page (one query, one Redis call)",
        field="reconcile_batch",
    ),
    Variable(
        "`RECONCILE_LOG_LEVEL`",
        "`INFO`",
        "reconciler",
        "log level of the reconciler process",
        field="reconcile_log_level",
    ),
    Variable(
        "`ALARM_OLDEST_JOB_S`",
        "`120`",
        "web",
        (
            "the console's alarm: a queue's oldest job has waited longer than this (seconds). Not below "
            "~100 s with the default schedule: a retry keeps its first `EnqueueTime`, so the last one "
            "reads about 100 s old for the instant it waits"
        ),
        field="alarm_oldest_job_s",
    ),
    Variable(
        "`MI_STACK`",
        "unset",
        "CLI",
        (
            "the `stack.json` (or state folder) of the `make run` the CLI is to talk to "
            "([Operations](operations.md#the-cli-and-the-api))"
        ),
    ),
    Variable(
        "`LOG_FORMAT`",
        "`text`",
        "all",
        (
            "`json`: one JSON object per line (see [Logs](operations.md#logs)); `text`: plain lines for a terminal; "
            "anything else is refused"
        ),
        field="log_format",
    ),
    Variable(
        "`WORKER_LOG_LEVEL`",
        "`INFO`",
        "worker",
        "log level of the worker processes",
        field="worker_log_level",
    ),
    Variable(
        "`METRICS_TOKENS`",
        "—",
        "web",
        (
            "comma-separated bearer tokens that may only read `GET /metrics` (Prometheus' credential); "
            "admin tokens may read it too"
        ),
        field="metrics_tokens",
    ),
    Variable(
        "`PROMETHEUS_MULTIPROC_DIR`",
        "unset (`make run`: `.state/metrics`)",
        "web, worker",
        (
            "folder where this host's processes keep their metric values, summed by `/metrics`; one per "
            "host, emptied before the processes start (see [Metrics](operations.md#metrics))"
        ),
        field="prometheus_multiproc_dir",
    ),
    Variable(
        "`EVENT_SPOOL_DIR`",
        "unset (`make run`: `.state/events`)",
        "web, worker, reconciler",
        (
            "folder where this host's processes keep on disk the events neither Redis nor PostgreSQL "
            "takes (held in memory and handed over again), so that the next process started takes over "
            "those of a process killed meanwhile; one per host and stack, never shared by two stacks. "
            "Unset, such events are in memory only (see [the hot path](hotpath.md))"
        ),
        field="event_spool_dir",
    ),
    Variable(
        "`dramatiq_restart_delay`",
        "`5000`",
        "worker",
        "pause before a consumer reconnects after a Redis error (5 s, as in the .NET system)",
        field="dramatiq_restart_delay",
    ),
    Variable(
        "`HOTPATH_ANSWERS_INTERVAL_MS`, `HOTPATH_ANSWERS_BATCH`",
        "`1000`, `500`",
        "hotpath",
        "answer flusher: pause between cycles, records per transaction",
        field="hotpath_overrides",
    ),
    Variable(
        "`HOTPATH_PROGRESS_INTERVAL_MS`, `HOTPATH_PROGRESS_BATCH`",
        "`2000`, `500`",
        "hotpath",
        "progress flusher: the same",
        field="hotpath_overrides",
    ),
    Variable(
        "`HOTPATH_EVENTS_INTERVAL_MS`, `HOTPATH_EVENTS_BATCH`",
        "`1000`, `500`",
        "hotpath",
        "event-log consumer: pause when idle, events per round trip",
        field="hotpath_overrides",
    ),
    Variable(
        "`HOTPATH_LOCK_TTL_MS`",
        "`15000`",
        "hotpath",
        "lease of each loop; a standby takes over this long after its owner died",
        field="hotpath_overrides",
    ),
    Variable(
        "`HOTPATH_LOG_LEVEL`",
        "`INFO`",
        "hotpath",
        "log level of the hotpath process",
        field="hotpath_log_level",
    ),
    Variable(
        "`MI_STATE_DIR`",
        "`.state`",
        "make run, make demo",
        (
            "where the embedded servers keep their data, the credentials (`secrets.json`: `SECRET_KEY`, "
            "`ADMIN_TOKENS`, `POSTGRES_PASSWORD`, `REDIS_PASSWORD`; 0600), `stack.json` (0600), "
            "`supervisord.conf`, `console.log` and `logs/`"
        ),
    ),
    Variable(
        "`MI_STOP_TIMEOUT_S`",
        "`WORKER_SHUTDOWN_TIMEOUT_MS` / 1000 + 10 (610)",
        "make run",
        "how long supervisord waits after SIGTERM before it SIGKILLs a process (`stopwaitsecs`)",
    ),
    Variable(
        "`MI_TERMINAL_LOG`",
        "`quiet`",
        "make run",
        (
            "what `make run`'s terminal shows: `quiet`, the banner, `ready`, starts and stops of "
            "processes, warnings and errors; `all`, every line of every process, the web's access log "
            "included. The files under `.state/logs/` hold everything either way"
        ),
    ),
    Variable(
        "`MI_ENV_FILE`, `MI_PROCFILE`",
        "`.env`, `Procfile`",
        "make run",
        "another settings file (`/dev/null`: none) or Procfile (the tests add a type to a copy)",
    ),
    Variable(
        "`TEST_DATABASE_URL`, `TEST_REDIS_URL`",
        "see make test",
        "tests",
        "servers for the test suite",
    ),
    Variable(
        "`MI_TEST_PRIVATE_SERVERS`",
        "unset",
        "make test",
        (
            "`1`: never reuse the servers on the default ports; start private ones (installed with apt if "
            "absent)"
        ),
    ),
)


def configuration_table() -> str:
    """README's configuration table, from `VARIABLES`."""
    head = ["| variable | default | used by | meaning |", "|---|---|---|---|"]
    return "\n".join(head + [v.row() for v in VARIABLES]) + "\n"
