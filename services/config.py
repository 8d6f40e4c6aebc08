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

from services.errors import ConfigError

#: Local defaults, matching what `make run` prints when it starts its own servers.
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/mi_assessment"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: Size of the SQLAlchemy connection pool of one process.
DEFAULT_DB_POOL_SIZE = 5

#: Time zone of the admins (the product's users are in China): ADMIN_TIMEZONE's default.
DEFAULT_ADMIN_TIMEZONE = "Asia/Shanghai"


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


def _timezone(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip() or default
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{name} must be an IANA time zone such as Asia/Shanghai, got {value!r}") from None
    return value


def normalize_database_url(url: str) -> str:
    """Use psycopg 3 for plain postgresql:// URLs (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = DEFAULT_REDIS_URL
    db_pool_size: int = DEFAULT_DB_POOL_SIZE
    #: Secret for signing user tokens (web tier).
    secret_key: str = ""
    #: Bearer tokens accepted on the admin API; empty means the admin API refuses every call.
    admin_tokens: tuple[str, ...] = field(default_factory=tuple)
    #: Bearer tokens that may only scrape GET /metrics (Prometheus' credential); admin tokens may too.
    metrics_tokens: tuple[str, ...] = field(default_factory=tuple)
    #: IANA time zone in which an admin's date/time without an offset is read (ADMIN_TIMEZONE).
    admin_timezone: str = DEFAULT_ADMIN_TIMEZONE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        tokens = tuple(t.strip() for t in env.get("ADMIN_TOKENS", "").split(",") if t.strip())
        scrapers = tuple(t.strip() for t in env.get("METRICS_TOKENS", "").split(",") if t.strip())
        return cls(
            database_url=normalize_database_url(
                _url(env, "DATABASE_URL", DEFAULT_DATABASE_URL, ("postgresql", "postgres"))
            ),
            redis_url=_url(env, "REDIS_URL", DEFAULT_REDIS_URL, ("redis://", "rediss://", "unix://")),
            db_pool_size=env_int(env, "DB_POOL_SIZE", DEFAULT_DB_POOL_SIZE, minimum=1),
            secret_key=env.get("SECRET_KEY", ""),
            admin_tokens=tokens,
            metrics_tokens=scrapers,
            admin_timezone=_timezone(env, "ADMIN_TIMEZONE", DEFAULT_ADMIN_TIMEZONE),
        )

    @property
    def admin_zone(self) -> ZoneInfo:
        return ZoneInfo(self.admin_timezone)

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]
