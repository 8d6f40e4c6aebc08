"""Settings: every variable the project reads, in one object, read from the environment here only.

Every process builds one `Settings` with `Settings.from_env()` in its composition root
(web: `web.create_app`; worker: actors/bootstrap.py; hotpath/__main__.py; reconciler/__main__.py)
and hands its values on; tests build one directly. A malformed value raises
`ConfigError` naming the variable, at start-up rather than at first use.

`VARIABLES` documents each one (default, who reads it, what it means), in the order of
README's "Configuration" table, which is generated from it (`python -m scripts.settings_table`;
tests/unit/test_settings_table.py keeps them equal). The variables the Procfile's shell,
`make run` and the tests read are listed there too, without a field: the app never reads them.
Nothing else in the packages reads the environment (`environment()` is the one accessor,
for the CLI's stack discovery).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from config.redis_urls import SENTINEL_SCHEME, is_sentinel_url, parse_sentinel_url
from services.domain.errors import ConfigError
from services.domain.retries import MAX_RETRY_COUNT, RETRY_DELAYS_ENV, RETRY_DELAYS_MS

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
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = DEFAULT_REDIS_URL
    db_pool_size: int = DEFAULT_DB_POOL_SIZE
    #: Connections opened beyond the pool under load (closed when given back); None: as many as the pool.
    db_max_overflow: int | None = None
    #: PostgreSQL is reached through a transaction-pooling proxy (PgBouncer `pool_mode =
    #: transaction`): no server-side prepared statements, no session settings at connect.
    db_transaction_pooling: bool = False
    #: Secret for signing user tokens (web tier).
    secret_key: str = ""
    #: Bearer tokens accepted on the admin API; empty means the admin API refuses every call.
    admin_tokens: tuple[str, ...] = field(default_factory=tuple)
    #: IANA name of the time zone of the times users read (DISPLAY_TIMEZONE).
    display_timezone: str = DEFAULT_DISPLAY_TIMEZONE

    @property
    def display_zone(self) -> ZoneInfo:
        return time_zone(self.display_timezone)

    #: Hash-tagged Redis keys (REDIS_HASH_TAGS, see `redis_hash_tags`).
    redis_hash_tags: bool = False
    #: Bearer tokens that may only scrape GET /metrics (Prometheus' credential); admin tokens may too.
    metrics_tokens: tuple[str, ...] = field(default_factory=tuple)
    #: IANA time zone in which an admin's date/time without an offset is read (ADMIN_TIMEZONE).
    admin_timezone: str = DEFAULT_ADMIN_TIMEZONE
    #: Bound of `eventlog:queue` (EVENT_LOG_QUEUE_MAX, see DEFAULT_EVENT_LOG_QUEUE_MAX).
    event_log_queue_max: int = DEFAULT_EVENT_LOG_QUEUE_MAX
    #: TRUSTED_PROXIES: how many proxies in front of the web process append to
    #: X-Forwarded-For / X-Forwarded-Proto (web/__init__.py applies Werkzeug's ProxyFix with
    #: that many hops). 0, the default: the headers are ignored and the client address is
    #: the TCP peer's, so a client cannot pick the address the sign-in limit counts.
    trusted_proxies: int = 0
    #: The console's alarm: a queue's oldest job waiting longer (ALARM_OLDEST_JOB_S, seconds).
    alarm_oldest_job_s: int = DEFAULT_ALARM_OLDEST_JOB_S
    #: APP_ENV: production, development or test (web: production refuses weak secrets).
    app_env: str = "development"
    #: False when Flask's CLI built the app (FLASK_RUN_FROM_CLI=true): no server warnings then.
    serving: bool = True
    #: LOG_FORMAT of every process: text or json.
    log_format: str = "text"
    #: Log levels of the worker, hotpath and reconciler processes.
    worker_log_level: str = "INFO"
    hotpath_log_level: str = "INFO"
    reconcile_log_level: str = "INFO"
    #: BROKER_HEARTBEAT_TIMEOUT_MS: a consumer silent this long has its jobs returned.
    broker_heartbeat_timeout_ms: int = DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS
    #: REPORT_RETRY_DELAYS_MS: the report and admin actors' retry schedule (tests and drills only).
    report_retry_delays_ms: tuple[int, ...] = RETRY_DELAYS_MS
    #: dramatiq_restart_delay is set: Dramatiq's own consumer restart delay is left to it.
    dramatiq_restart_delay: bool = False
    #: PROMETHEUS_MULTIPROC_DIR ("" unset): prometheus_client's multiprocess folder.
    prometheus_multiproc_dir: str = ""
    #: The reconciler's pass interval, grace and page size (RECONCILE_*).
    reconcile_interval_ms: int = DEFAULT_RECONCILE_INTERVAL_MS
    reconcile_grace_ms: int = DEFAULT_RECONCILE_GRACE_MS
    reconcile_batch: int = DEFAULT_RECONCILE_BATCH
    #: The hot path's retention loop (EVENT_LOG_RETENTION_DAYS, DELETED_RECORD_PURGE_DAYS, HOTPATH_*).
    event_log_retention_days: int = DEFAULT_EVENT_LOG_RETENTION_DAYS
    deleted_record_purge_days: int = DEFAULT_DELETED_RECORD_PURGE_DAYS
    hotpath_retention_interval_ms: int = DEFAULT_RETENTION_INTERVAL_MS
    hotpath_invalid_keep: int = DEFAULT_INVALID_KEEP
    #: HOTPATH_<FIELD> of the hot path's run-time settings, verbatim: they are validated where
    #: they are read each cycle (an invalid one is logged and ignored, not refused at start-up).
    hotpath_overrides: tuple[tuple[str, str], ...] = ()
    #: MI_STACK ("" unset): the stack the CLI talks to (web/cli_stack.py reads it with the rest).
    cli_stack: str = ""

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
            dramatiq_restart_delay="dramatiq_restart_delay" in env,
            prometheus_multiproc_dir=env.get("PROMETHEUS_MULTIPROC_DIR", ""),
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
            cli_stack=env.get("MI_STACK", ""),
        )

    def hotpath_env(self) -> dict[str, str]:
        """The hot path's run-time settings given in the environment, by variable (HOTPATH_<FIELD>)."""
        return {HOTPATH_ENV_PREFIX + name.upper(): value for name, value in self.hotpath_overrides}

    @property
    def admin_zone(self) -> ZoneInfo:
        return ZoneInfo(self.admin_timezone)

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Variable:
    """One row of README's configuration table: a variable (or a few read together), its
    default, who reads it and what it means; `field` names the `Settings` field holding it
    (None: read by the Procfile's shell, `make run`, Dramatiq or the tests, never by the app)."""

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
            "[SCALING.md](SCALING.md#redis-sentinel)). A malformed URL is refused at start-up"
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
            "[docs/cluster.md](docs/cluster.md)"
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
            "([SECURITY.md](SECURITY.md))"
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
            "[SCALING.md](SCALING.md#postgresql-connections-and-pgbouncer)"
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
        "listen port (Procfile); `make run` sets it to 8000 or a free port, honcho to `5000` unless set",
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
            "threads per gunicorn worker process (`gthread`, see [Processes](#processes-procfile)): each "
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
            "group commit, 2 × 16 chosen after it (BENCHMARKS.md, benchmark 8)"
        ),
    ),
    Variable(
        "`WORKER_THREADS`",
        "`16`",
        "worker",
        (
            "`dramatiq --threads`: the jobs a process runs at once, and so the most records in one of its "
            "group-commit transactions (half of it on average)"
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
            "([Operations](#the-cli-and-the-api))"
        ),
        field="cli_stack",
    ),
    Variable(
        "`LOG_FORMAT`",
        "`text`",
        "all",
        (
            "`json`: one JSON object per line (see [Logs](#logs)); `text`: plain lines for a terminal; "
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
            "host, emptied before the processes start (see [Metrics](#metrics))"
        ),
        field="prometheus_multiproc_dir",
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


def undocumented_fields() -> list[str]:
    """Fields of `Settings` no row of `VARIABLES` documents (none, kept so by a test)."""
    documented = {v.field for v in VARIABLES}
    return [f.name for f in fields(Settings) if f.name not in documented]
