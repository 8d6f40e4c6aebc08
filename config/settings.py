"""Settings, read from the environment in one place.

Every process (web, worker, the background loops, the scripts) builds a `Settings`
with `Settings.from_env()`; tests build one directly. A malformed value raises
`ConfigError` naming the variable, at start-up rather than at first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from config.redis_urls import SENTINEL_SCHEME, is_sentinel_url, parse_sentinel_url
from services.domain.errors import ConfigError

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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
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
        )

    @property
    def admin_zone(self) -> ZoneInfo:
        return ZoneInfo(self.admin_timezone)

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]
