"""Settings: every variable the project reads, in one object, read from the environment here only.

Every process builds one `Settings` with `Settings.from_env()` in its composition root
(web: `web.create_app`; worker: actors/bootstrap.py; hotpath/__main__.py; reconciler/__main__.py)
and hands its values on; tests build one directly. A malformed value raises
`ConfigError` naming the variable, at start-up rather than at first use.

config/variables.py documents each one (default, who reads it, what it means), in the order
of README's "Configuration" table, which is generated from it (`python -m scripts.settings_table`;
tests/unit/test_settings_table.py keeps them equal). The variables the Procfile's shell,
`make run` and the tests read are listed there too, without a field: the app never reads them.
Nothing else in the packages reads the environment (`environment()` is the one accessor,
for the CLI's stack discovery).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from config import ConfigError
from config.redis_urls import SENTINEL_SCHEME, is_sentinel_url, parse_sentinel_url
from config.retries import MAX_RETRY_COUNT, RETRY_DELAYS_ENV, RETRY_DELAYS_MS

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
    #: REPORT_BATCH_SIZE: most report jobs per call and transaction (see DEFAULT_REPORT_BATCH_SIZE).
    report_batch_size: int = DEFAULT_REPORT_BATCH_SIZE
    #: dramatiq_restart_delay is set: Dramatiq's own consumer restart delay is left to it.
    dramatiq_restart_delay: bool = False
    #: PROMETHEUS_MULTIPROC_DIR ("" unset): prometheus_client's multiprocess folder.
    prometheus_multiproc_dir: str = ""
    #: EVENT_SPOOL_DIR ("" unset: held events in memory only): redis_adapters/event_spool.py.
    event_spool_dir: str = ""
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
            dramatiq_restart_delay="dramatiq_restart_delay" in env,
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
