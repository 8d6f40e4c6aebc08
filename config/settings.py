"""Settings: every variable the project reads, in one object, read from the environment here only.

Every process builds one `Settings` with `Settings.from_env()` in its composition root
(web: `web.create_app`; worker: actors/bootstrap.py; hotpath/__main__.py; reconciler/__main__.py)
and hands its values on; tests build one directly. A malformed value raises
`ConfigError` naming the variable, at start-up rather than at first use.

Each field documents the variables it is read from (`setting`, `Variable`): the configuration
table of docs/configuration.md is generated from them (`python -m scripts.settings_table`;
tests/unit/test_settings_table.py keeps them equal). The variables only the Procfile's shell,
`make run` and the tests read are documented with that tooling (scripts/settings_table.py).
Nothing else in the packages reads the environment (`environment()` is the one accessor,
for the CLI's stack discovery).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from config import ConfigError
from config.redis_urls import SENTINEL_SCHEME, is_sentinel_url, parse_sentinel_url
from config.retries import ERROR_RECOVERY_DELAY_MS, MAX_RETRY_COUNT, RETRY_DELAYS_ENV, RETRY_DELAYS_MS

T = TypeVar("T")

#: Local defaults, matching what `make run` prints when it starts its own servers.
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/mi_assessment"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: The time zone in which users read times (pages and texts; the API's JSON carries offsets).
DEFAULT_DISPLAY_TIMEZONE = "Asia/Shanghai"

#: Scheme of a Redis Cluster URL: `redis+cluster://[[user]:password@]host:port[,host:port...]`
#: (any of the nodes; the client discovers the rest). It implies hash-tagged keys.
REDIS_CLUSTER_SCHEME = "redis+cluster://"

#: Size of the SQLAlchemy connection pool of one process.
DEFAULT_DB_POOL_SIZE = 5

#: Most entries `eventlog:queue` holds (EVENT_LOG_QUEUE_MAX). Beyond it (the hot path's
#: consumer stopped or far behind) events are written to PostgreSQL directly instead of
#: growing Redis's memory: about 300 bytes an entry, so 500,000 is ~150 MB, or hours of
#: events at the product's rates.
DEFAULT_EVENT_LOG_QUEUE_MAX = 500_000

#: ALARM_OLDEST_JOB_S's default: the console raises its alarm when a queue's oldest job has
#: waited longer (seconds). A job a live worker takes waits milliseconds. Not less: a retry
#: keeps its first EnqueueTime, so the last retry (60 s after a wait of 10 + 30 s) reads as
#: about 100 s old for the instant it waits in the queue.
DEFAULT_ALARM_OLDEST_JOB_S = 120

#: Time zone of the admins (the product's users are in China): ADMIN_TIMEZONE's default.
DEFAULT_ADMIN_TIMEZONE = "Asia/Shanghai"

#: Values of APP_ENV; empty or unset means development. A typo ("prod") must not skip
#: the production checks in silence, so anything else is refused.
APP_ENVS = ("production", "development", "test")
#: Values of LOG_FORMAT (unset: text).
LOG_FORMATS = ("text", "json")
#: Silence after which a worker's jobs are returned to the queue (the broker's default).
DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS = 60_000
#: Most report jobs one worker thread generates in one call and one transaction (a batch,
#: broker/src/listbroker/batches.py); each job keeps its own outcome. 1: one job per call and
#: per transaction. 100 is what a process holds at most (the broker's MAX_ADAPTIVE_PREFETCH),
#: so at the Procfile's 2 × 32 one call takes all of it: ~94 records per transaction against
#: ~30 with 32 at 2 × 64, and 1.4 × the reports/s (BENCHMARKS.md, "Generation vs the batched limit").
DEFAULT_REPORT_BATCH_SIZE = 100
#: The reconciler: pause between passes, grace of a record in status 3, records per page.
DEFAULT_RECONCILE_INTERVAL_MS = 10_000
DEFAULT_RECONCILE_GRACE_MS = 30_000
DEFAULT_RECONCILE_BATCH = 1_000
#: Retention (hotpath): event-log days, days after a soft delete, pause between cycles, invalid entries kept.
DEFAULT_EVENT_LOG_RETENTION_DAYS = 180
DEFAULT_DELETED_RECORD_PURGE_DAYS = 30
DEFAULT_RETENTION_INTERVAL_MS = 3_600_000
DEFAULT_INVALID_KEEP = 100_000
#: Prefix of the hot path's run-time settings in the environment (hotpath/runtime_settings.py).
HOTPATH_ENV_PREFIX = "HOTPATH_"
#: The hot path's run-time settings (HOTPATH_<FIELD>), read each cycle beside its Redis hash.
HOTPATH_RUNTIME_FIELDS = (
    "answers_interval_ms",
    "answers_batch",
    "progress_interval_ms",
    "progress_batch",
    "events_interval_ms",
    "events_batch",
    "lock_ttl_ms",
)


def environment() -> Mapping[str, str]:
    """The process's environment: read here only (Settings.from_env, the CLI's stack discovery)."""
    return os.environ


def prometheus_multiproc_dir() -> str:
    """PROMETHEUS_MULTIPROC_DIR now ("" unset). Read live, not from `Settings`: prometheus_client
    reads the variable itself whenever it counts, so /metrics must follow what it sees."""
    return environment().get("PROMETHEUS_MULTIPROC_DIR", "")


#: Dramatiq's variable: the pause before it starts a consumer again after an unexpected error
#: (a Redis error the consumer waits out itself, without a restart).
DRAMATIQ_RESTART_DELAY = "dramatiq_restart_delay"


def default_dramatiq_restart_delay() -> None:
    """Unset, `dramatiq_restart_delay` becomes the project's (ERROR_RECOVERY_DELAY_MS). Dramatiq
    reads it once, when dramatiq.worker is first imported: the caller (actors.run_worker) runs
    this before that import, and the worker processes Dramatiq forks inherit the result."""
    os.environ.setdefault(DRAMATIQ_RESTART_DELAY, str(ERROR_RECOVERY_DELAY_MS))


def retry_delays_ms(env: Mapping[str, str]) -> tuple[int, ...]:
    """The retry schedule: RETRY_DELAYS_MS unless REPORT_RETRY_DELAYS_MS sets another.

    A malformed value raises ValueError naming the variable: a worker must not start on a
    schedule it misread.
    """
    raw = env.get(RETRY_DELAYS_ENV, "").strip()
    if not raw:
        return RETRY_DELAYS_MS
    try:
        delays = tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise ValueError(f"{RETRY_DELAYS_ENV} must be comma-separated milliseconds, got {raw!r}") from None
    if len(delays) != MAX_RETRY_COUNT or any(d < 0 for d in delays):
        raise ValueError(f"{RETRY_DELAYS_ENV} needs {MAX_RETRY_COUNT} delays >= 0, got {raw!r}")
    return delays


def app_env(env: Mapping[str, str]) -> str:
    """APP_ENV, checked: one of `APP_ENVS` (unset or empty: development)."""
    value = env.get("APP_ENV", "").strip() or "development"
    if value not in APP_ENVS:
        raise ConfigError(f"APP_ENV must be one of {', '.join(APP_ENVS)}, got {value!r}")
    return value


def log_format(env: Mapping[str, str]) -> str:
    """LOG_FORMAT, checked: `text` (unset) or `json`."""
    value = env.get("LOG_FORMAT", "").strip().lower() or "text"
    if value not in LOG_FORMATS:
        raise ConfigError(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
    return value


def _level(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip() or "INFO"


def env_bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be 1/true/yes/on or 0/false/no/off, got {raw!r}")


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _url(env: Mapping[str, str], name: str, default: str, schemes: tuple[str, ...]) -> str:
    value = env.get(name) or default
    if not value.startswith(schemes):
        raise ConfigError(f"{name} must start with one of {', '.join(schemes)}, got {value!r}")
    return value


def time_zone(name: str, variable: str = "DISPLAY_TIMEZONE") -> ZoneInfo:
    """The IANA time zone `name` ("Asia/Shanghai", "UTC"); ConfigError naming `variable` otherwise."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"{variable} must be an IANA time zone such as Asia/Shanghai, got {name!r}"
        ) from None


def _redis_url(env: Mapping[str, str]) -> str:
    url = _url(
        env,
        "REDIS_URL",
        DEFAULT_REDIS_URL,
        ("redis://", "rediss://", "unix://", SENTINEL_SCHEME, REDIS_CLUSTER_SCHEME),
    )
    if is_sentinel_url(url):
        try:
            parse_sentinel_url(url)  # refused at start-up rather than at the first connection
        except ConfigError as exc:
            raise ConfigError(f"REDIS_URL: {exc}") from None
    return url


def _timezone(env: Mapping[str, str], name: str, default: str) -> str:
    return time_zone(env.get(name, "").strip() or default, name).key


def normalize_database_url(url: str) -> str:
    """Use psycopg 3 for plain postgresql:// URLs (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def redis_hash_tags(env: Mapping[str, str], redis_url: str) -> bool:
    """REDIS_HASH_TAGS: every Redis key in its hash-tagged form (`{report}:queue`, ...), one
    slot per queue and per hot-path family, as a Redis Cluster needs. On by default for a
    `redis+cluster://` URL (and cannot be turned off there); off otherwise, keeping the
    names the .NET producer uses (`report:queue`)."""
    raw = env.get("REDIS_HASH_TAGS", "").strip().lower()
    cluster = redis_url.startswith(REDIS_CLUSTER_SCHEME)
    if raw == "":
        return cluster
    if raw not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ConfigError(f"REDIS_HASH_TAGS must be 1 or 0, got {raw!r}")
    value = raw in ("1", "true", "yes", "on")
    if cluster and not value:
        raise ConfigError("REDIS_HASH_TAGS=0 cannot work with a redis+cluster:// URL (keys would span slots)")
    return value


@dataclass(frozen=True)
class Variable:
    """A variable's row of the configuration table (docs/configuration.md, generated by
    `python -m scripts.settings_table`): its name (or a few read together), which processes read
    it, what it means, and its default as a reader should see it (None: the field's own default,
    in backquotes)."""

    names: str
    used_by: str
    meaning: str
    default: str | None = None


def setting(default: T, *variables: Variable) -> T:
    """A field of `Settings` with its default and the variables it is read from, documented:
    the configuration table is generated from these (a field without one fails a test)."""
    return field(default=default, metadata={"variables": variables})


def documented(name: str) -> tuple[Variable, ...]:
    """The variables a field of `Settings` is read from, as its `setting` documents them."""
    return tuple(SETTINGS_FIELDS[name].metadata.get("variables", ()))


@dataclass(frozen=True)
class Settings:
    """Every variable the product reads, read once per process by `from_env`; each field is
    documented by the `Variable`s it is read from (see `setting`)."""

    database_url: str = setting(
        DEFAULT_DATABASE_URL,
        Variable(
            "DATABASE_URL",
            "all",
            (
                "PostgreSQL (psycopg 3 is used for `postgresql://`); a password goes in it: "
                "`postgresql://USER:PASSWORD@HOST:PORT/DB`. Unset, `make run` starts its own and sets it "
                "(with the password of `.state/secrets.json`)"
            ),
        ),
    )
    redis_url: str = setting(
        DEFAULT_REDIS_URL,
        Variable(
            "REDIS_URL",
            "all",
            (
                "Redis ≥ 6.2; a password goes in it: `redis://default:PASSWORD@HOST:PORT/0` (`default` is "
                "Redis's own user: `redis-cli -u` needs a user name, redis-py does not; an ACL user: "
                "`redis://USER:PASSWORD@…`). Unset, `make run` starts its own and sets it. Behind Redis "
                "Sentinel: "
                "`redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE_NAME[/DB][?sentinel_password=…]`"
                " — the Sentinels (port 26379 when left out), the master's name in their configuration, the "
                "master's password (redis-py's `Sentinel` conventions); every process follows a failover "
                "(see [scaling](scaling.md#redis-sentinel)). A malformed URL is refused at start-up"
            ),
        ),
        Variable(
            "REDIS_URL=redis+cluster://…",
            "all",
            (
                "a Redis Cluster: `redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]` (some of its "
                "masters; the client finds the rest and follows slot moves; database 0 only). Every process "
                "then uses redis-py's `RedisCluster`, and `REDIS_HASH_TAGS` is on. See [cluster](cluster.md)"
            ),
            default="—",
        ),
    )
    redis_hash_tags: bool = setting(
        False,
        Variable(
            "REDIS_HASH_TAGS",
            "all",
            (
                "`1`: every key hash-tagged, one slot per queue and per hot-path family: `{report}:queue`, "
                "`{report}:queue:dead`, `{report}:queue:heartbeats`, `{hotpath}:answers:<id>`, "
                "`{eventlog}:queue`… The default keeps the original names (`report:queue`, "
                "`report:queue:dead`, `broker:heartbeats`, `hotpath:…`, `eventlog:…`), which the .NET "
                "producer uses. All processes must agree; switching drops nothing only on an empty Redis "
                "(see docs/cluster.md)"
            ),
            default="`0` (`1` with a `redis+cluster://` URL)",
        ),
    )
    secret_key: str = setting(
        "",
        Variable(
            "SECRET_KEY",
            "web",
            (
                "signs user tokens and the admin console's session cookie; at least 32 bytes with "
                "`APP_ENV=production`"
            ),
            default="— (user API and console refuse calls)",
        ),
    )
    admin_tokens: tuple[str, ...] = setting(
        (),
        Variable(
            "ADMIN_TOKENS",
            "web",
            "comma-separated admin bearer tokens; each at least 32 bytes with `APP_ENV=production`",
            default="— (admin API refuses calls)",
        ),
    )
    admin_timezone: str = setting(
        DEFAULT_ADMIN_TIMEZONE,
        Variable(
            "ADMIN_TIMEZONE",
            "web, CLI",
            "IANA zone in which an admin's date/time without an offset is read",
        ),
    )
    trusted_proxies: int = setting(
        0,
        Variable(
            "TRUSTED_PROXIES",
            "web",
            (
                "how many proxies in front of the web process append to `X-Forwarded-For` / "
                "`X-Forwarded-Proto`: Werkzeug's `ProxyFix(x_for=N, x_proto=N)` then takes the client "
                "address (what the console's sign-in limit counts) and the scheme from them. `0`: the "
                "headers are ignored. Set it only when the web port is reachable through the proxy alone "
                "([security](security.md))"
            ),
        ),
    )
    app_env: str = setting(
        "development",
        Variable(
            "APP_ENV",
            "web",
            (
                "`production`, `development` or `test` (anything else is refused). With `production` the web"
                " app refuses to start (`ConfigError`, in gunicorn's log) when `SECRET_KEY` or any admin "
                "token is shorter than 32 bytes; elsewhere that is a warning. Make one with `python -c "
                "'import secrets; print(secrets.token_urlsafe(32))'`"
            ),
        ),
    )
    display_timezone: str = setting(
        DEFAULT_DISPLAY_TIMEZONE,
        Variable(
            "DISPLAY_TIMEZONE",
            "web",
            (
                "the IANA time zone of the times users read on pages (the API's JSON carries offsets and is "
                "unaffected); an unknown zone is refused at start"
            ),
        ),
    )
    serving: bool = setting(
        True,
        Variable(
            "FLASK_RUN_FROM_CLI",
            "web, CLI",
            (
                "`true` when Flask's command line (`flask --app web …`) builds the app: the warnings meant "
                "for a server starting up (an empty `SECRET_KEY` or `ADMIN_TOKENS`) are left out"
            ),
            default="set by Flask",
        ),
    )
    db_pool_size: int = setting(
        DEFAULT_DB_POOL_SIZE,
        Variable(
            "DB_POOL_SIZE",
            "all",
            (
                "SQLAlchemy pool size per process (`DB_MAX_OVERFLOW` more under load); web threads beyond "
                "both wait for a connection. Connections a deployment needs: see "
                "[scaling](scaling.md#postgresql-connections-and-pgbouncer)"
            ),
        ),
    )
    db_max_overflow: int | None = setting(
        None,
        Variable(
            "DB_MAX_OVERFLOW",
            "all",
            (
                "connections opened beyond the pool under load, closed when given back (`0`: never more than"
                " the pool)"
            ),
            default="`DB_POOL_SIZE`",
        ),
    )
    db_transaction_pooling: bool = setting(
        False,
        Variable(
            "DB_TRANSACTION_POOLING",
            "all",
            (
                "`1` when `DATABASE_URL` points at PgBouncer in `pool_mode = transaction`: psycopg prepares "
                "no statement on the server (`prepare_threshold=None`; PgBouncer before 1.21 cannot follow "
                "them) and no setting is sent at connect. Migrations (the `release` step) should reach "
                "PostgreSQL directly"
            ),
        ),
    )
    event_log_retention_days: int = setting(
        DEFAULT_EVENT_LOG_RETENTION_DAYS,
        Variable(
            "EVENT_LOG_RETENTION_DAYS",
            "hotpath",
            "event-log months wholly older than this are detached and dropped (at least 31)",
        ),
    )
    event_log_queue_max: int = setting(
        DEFAULT_EVENT_LOG_QUEUE_MAX,
        Variable(
            "EVENT_LOG_QUEUE_MAX",
            "web, worker, reconciler",
            (
                "most entries `eventlog:queue` holds; past it (the hot path stopped or behind) events are "
                "written to PostgreSQL directly, none lost"
            ),
        ),
    )
    deleted_record_purge_days: int = setting(
        DEFAULT_DELETED_RECORD_PURGE_DAYS,
        Variable(
            "DELETED_RECORD_PURGE_DAYS",
            "hotpath",
            "answers and reports of records soft-deleted longer ago are deleted (the record row stays)",
        ),
    )
    hotpath_retention_interval_ms: int = setting(
        DEFAULT_RETENTION_INTERVAL_MS,
        Variable(
            "HOTPATH_RETENTION_INTERVAL_MS",
            "hotpath",
            "pause between two retention cycles",
        ),
    )
    hotpath_invalid_keep: int = setting(
        DEFAULT_INVALID_KEEP,
        Variable(
            "HOTPATH_INVALID_KEEP",
            "hotpath",
            (
                "newest entries kept in each set-aside list (`hotpath:answers:invalid`, "
                "`hotpath:progress:invalid`, `eventlog:invalid`); older ones are dropped with a warning"
            ),
        ),
    )
    broker_heartbeat_timeout_ms: int = setting(
        DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS,
        Variable(
            "BROKER_HEARTBEAT_TIMEOUT_MS",
            "worker",
            "silence after which a worker's jobs are returned to the queue",
        ),
    )
    report_retry_delays_ms: tuple[int, ...] = setting(
        RETRY_DELAYS_MS,
        Variable(
            "REPORT_RETRY_DELAYS_MS",
            "worker",
            (
                "the retry schedule, three delays in ms; for tests and drills only (the .NET clients expect "
                "the default)"
            ),
            default="unset (`10000,30000,60000`)",
        ),
    )
    report_batch_size: int = setting(
        DEFAULT_REPORT_BATCH_SIZE,
        Variable(
            "REPORT_BATCH_SIZE",
            "worker",
            (
                "most report jobs a worker thread takes in one call and generates in one transaction (of "
                "those its process holds: a trickle runs one by one, with no wait for a batch to fill); each"
                " job is still acknowledged, retried on its own schedule and dead-lettered alone. `1`: one "
                "job per call and per transaction (for tests and diagnosis: 0.44 × the rate, "
                "[BENCHMARKS.md](../BENCHMARKS.md#generation-vs-the-batched-limit))"
            ),
        ),
    )
    reconcile_interval_ms: int = setting(
        DEFAULT_RECONCILE_INTERVAL_MS,
        Variable(
            "RECONCILE_INTERVAL_MS",
            "reconciler",
            "pause between two passes",
        ),
    )
    reconcile_grace_ms: int = setting(
        DEFAULT_RECONCILE_GRACE_MS,
        Variable(
            "RECONCILE_GRACE_MS",
            "reconciler",
            "how long a record stays in status 3, unchanged, before a missing job counts as lost",
        ),
    )
    reconcile_batch: int = setting(
        DEFAULT_RECONCILE_BATCH,
        Variable(
            "RECONCILE_BATCH",
            "reconciler",
            "records per page (one query, one Redis call)",
        ),
    )
    reconcile_log_level: str = setting(
        "INFO",
        Variable(
            "RECONCILE_LOG_LEVEL",
            "reconciler",
            "log level of the reconciler process",
        ),
    )
    alarm_oldest_job_s: int = setting(
        DEFAULT_ALARM_OLDEST_JOB_S,
        Variable(
            "ALARM_OLDEST_JOB_S",
            "web",
            (
                "the console's alarm: a queue's oldest job has waited longer than this (seconds). Not below "
                "~100 s with the default schedule: a retry keeps its first `EnqueueTime`, so the last one "
                "reads about 100 s old for the instant it waits"
            ),
        ),
    )
    log_format: str = setting(
        "text",
        Variable(
            "LOG_FORMAT",
            "all",
            (
                "`json`: one JSON object per line (see [Logs](operations.md#logs)); `text`: plain lines for "
                "a terminal; anything else is refused"
            ),
        ),
    )
    worker_log_level: str = setting(
        "INFO",
        Variable(
            "WORKER_LOG_LEVEL",
            "worker",
            "log level of the worker processes",
        ),
    )
    metrics_tokens: tuple[str, ...] = setting(
        (),
        Variable(
            "METRICS_TOKENS",
            "web",
            (
                "comma-separated bearer tokens that may only read `GET /metrics` (Prometheus' credential); "
                "admin tokens may read it too"
            ),
            default="—",
        ),
    )
    prometheus_multiproc_dir: str = setting(
        "",
        Variable(
            "PROMETHEUS_MULTIPROC_DIR",
            "web, worker",
            (
                "folder where this host's processes keep their metric values, summed by `/metrics`; one per "
                "host, emptied before the processes start (see [Metrics](operations.md#metrics))"
            ),
            default="unset (`make run`: `.state/metrics`)",
        ),
    )
    event_spool_dir: str = setting(
        "",
        Variable(
            "EVENT_SPOOL_DIR",
            "web, worker, reconciler",
            (
                "folder where this host's processes keep on disk the events neither Redis nor PostgreSQL "
                "takes (held in memory and handed over again), so that the next process started takes over "
                "those of a process killed meanwhile; one per host and stack, never shared by two stacks. "
                "Unset, such events are in memory only (see [the hot path](hotpath.md))"
            ),
            default="unset (`make run`: `.state/events`)",
        ),
    )
    dramatiq_restart_delay: bool = setting(
        False,
        Variable(
            "dramatiq_restart_delay",
            "worker",
            (
                "pause before Dramatiq starts a consumer again after an unexpected error (5 s, as in the "
                ".NET system); a Redis error is waited out by the consumer itself, 1 s doubling to 10 s"
            ),
            default="`5000`",
        ),
    )
    # Verbatim: they are validated where they are read each cycle (an invalid one is logged and
    # ignored, not refused at start-up).
    hotpath_overrides: tuple[tuple[str, str], ...] = setting(
        (),
        Variable(
            "HOTPATH_ANSWERS_INTERVAL_MS, HOTPATH_ANSWERS_BATCH",
            "hotpath",
            "answer flusher: pause between cycles, records per transaction",
            default="`1000`, `500`",
        ),
        Variable(
            "HOTPATH_PROGRESS_INTERVAL_MS, HOTPATH_PROGRESS_BATCH",
            "hotpath",
            "progress flusher: the same",
            default="`2000`, `500`",
        ),
        Variable(
            "HOTPATH_EVENTS_INTERVAL_MS, HOTPATH_EVENTS_BATCH",
            "hotpath",
            "event-log consumer: pause when idle, events per round trip",
            default="`1000`, `500`",
        ),
        Variable(
            "HOTPATH_LOCK_TTL_MS",
            "hotpath",
            "lease of each loop; a standby takes over this long after its owner died",
            default="`15000`",
        ),
    )
    hotpath_log_level: str = setting(
        "INFO",
        Variable(
            "HOTPATH_LOG_LEVEL",
            "hotpath",
            "log level of the hotpath process",
        ),
    )

    @property
    def display_zone(self) -> ZoneInfo:
        return time_zone(self.display_timezone)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = environment() if env is None else env
        redis_url = _redis_url(env)
        tokens = tuple(t.strip() for t in env.get("ADMIN_TOKENS", "").split(",") if t.strip())
        scrapers = tuple(t.strip() for t in env.get("METRICS_TOKENS", "").split(",") if t.strip())
        return cls(
            database_url=normalize_database_url(
                _url(env, "DATABASE_URL", DEFAULT_DATABASE_URL, ("postgresql", "postgres"))
            ),
            redis_url=redis_url,
            db_pool_size=env_int(env, "DB_POOL_SIZE", DEFAULT_DB_POOL_SIZE, minimum=1),
            db_max_overflow=(
                env_int(env, "DB_MAX_OVERFLOW", 0, minimum=0)
                if (env.get("DB_MAX_OVERFLOW") or "").strip()
                else None
            ),
            db_transaction_pooling=env_bool(env, "DB_TRANSACTION_POOLING"),
            secret_key=env.get("SECRET_KEY", ""),
            admin_tokens=tokens,
            display_timezone=_timezone(env, "DISPLAY_TIMEZONE", DEFAULT_DISPLAY_TIMEZONE),
            redis_hash_tags=redis_hash_tags(env, redis_url),
            metrics_tokens=scrapers,
            admin_timezone=_timezone(env, "ADMIN_TIMEZONE", DEFAULT_ADMIN_TIMEZONE),
            event_log_queue_max=env_int(env, "EVENT_LOG_QUEUE_MAX", DEFAULT_EVENT_LOG_QUEUE_MAX, minimum=1),
            trusted_proxies=env_int(env, "TRUSTED_PROXIES", 0, minimum=0),
            alarm_oldest_job_s=env_int(env, "ALARM_OLDEST_JOB_S", DEFAULT_ALARM_OLDEST_JOB_S, minimum=1),
            app_env=app_env(env),
            serving=env.get("FLASK_RUN_FROM_CLI") != "true",
            log_format=log_format(env),
            worker_log_level=_level(env, "WORKER_LOG_LEVEL"),
            hotpath_log_level=_level(env, "HOTPATH_LOG_LEVEL"),
            reconcile_log_level=_level(env, "RECONCILE_LOG_LEVEL"),
            broker_heartbeat_timeout_ms=env_int(
                env, "BROKER_HEARTBEAT_TIMEOUT_MS", DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS, minimum=2_000
            ),
            report_retry_delays_ms=retry_delays_ms(env),
            report_batch_size=env_int(env, "REPORT_BATCH_SIZE", DEFAULT_REPORT_BATCH_SIZE, minimum=1),
            dramatiq_restart_delay=DRAMATIQ_RESTART_DELAY in env,
            prometheus_multiproc_dir=env.get("PROMETHEUS_MULTIPROC_DIR", ""),
            event_spool_dir=env.get("EVENT_SPOOL_DIR", ""),
            reconcile_interval_ms=env_int(
                env, "RECONCILE_INTERVAL_MS", DEFAULT_RECONCILE_INTERVAL_MS, minimum=100
            ),
            reconcile_grace_ms=env_int(env, "RECONCILE_GRACE_MS", DEFAULT_RECONCILE_GRACE_MS, minimum=1_000),
            reconcile_batch=env_int(env, "RECONCILE_BATCH", DEFAULT_RECONCILE_BATCH, minimum=1),
            # A month partition is dropped only once wholly past retention: under a month means little.
            event_log_retention_days=env_int(
                env, "EVENT_LOG_RETENTION_DAYS", DEFAULT_EVENT_LOG_RETENTION_DAYS, minimum=31
            ),
            deleted_record_purge_days=env_int(
                env, "DELETED_RECORD_PURGE_DAYS", DEFAULT_DELETED_RECORD_PURGE_DAYS, minimum=0
            ),
            hotpath_retention_interval_ms=env_int(
                env, "HOTPATH_RETENTION_INTERVAL_MS", DEFAULT_RETENTION_INTERVAL_MS, minimum=1_000
            ),
            hotpath_invalid_keep=env_int(env, "HOTPATH_INVALID_KEEP", DEFAULT_INVALID_KEEP, minimum=1),
            hotpath_overrides=tuple(
                (f, env[HOTPATH_ENV_PREFIX + f.upper()])
                for f in HOTPATH_RUNTIME_FIELDS
                if HOTPATH_ENV_PREFIX + f.upper() in env
            ),
        )

    def hotpath_env(self) -> dict[str, str]:
        """The hot path's run-time settings given in the environment, by variable (HOTPATH_<FIELD>)."""
        return {HOTPATH_ENV_PREFIX + name.upper(): value for name, value in self.hotpath_overrides}

    @property
    def admin_zone(self) -> ZoneInfo:
        return ZoneInfo(self.admin_timezone)

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


#: The fields of `Settings` by name, with their documentation (`documented`).
SETTINGS_FIELDS = {f.name: f for f in fields(Settings)}
