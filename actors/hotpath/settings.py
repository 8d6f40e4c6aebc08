"""Run-time settings of the hot-path loops (seed 001: IOptionsMonitor hot reload).

Re-read at the start of every cycle, each field from the first source that has a valid
value: the Redis hash `hotpath:settings` (change it while running:
``redis-cli HSET hotpath:settings answers_interval_ms 500``), then the environment
(``HOTPATH_ANSWERS_INTERVAL_MS``), then the default in actors/hotpath/constants.py.
An invalid value (not an integer, out of bounds) is logged once and ignored.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import redis

from actors.hotpath import constants as c

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HotpathSettings:
    answers_interval_ms: int = c.DEFAULT_ANSWERS_INTERVAL_MS
    answers_batch: int = c.DEFAULT_ANSWERS_BATCH
    progress_interval_ms: int = c.DEFAULT_PROGRESS_INTERVAL_MS
    progress_batch: int = c.DEFAULT_PROGRESS_BATCH
    events_interval_ms: int = c.DEFAULT_EVENTS_INTERVAL_MS
    events_batch: int = c.DEFAULT_EVENTS_BATCH
    lock_ttl_ms: int = c.DEFAULT_LOCK_TTL_MS


#: Accepted range of each field (inclusive). Batches stay below Lua's unpack limit.
BOUNDS: dict[str, tuple[int, int]] = {
    "answers_interval_ms": (10, 3_600_000),
    "answers_batch": (1, 10_000),
    "progress_interval_ms": (10, 3_600_000),
    "progress_batch": (1, 10_000),
    "events_interval_ms": (10, 3_600_000),
    "events_batch": (1, 5_000),
    "lock_ttl_ms": (1_000, 600_000),
}
FIELDS = tuple(f.name for f in fields(HotpathSettings))
ENV_PREFIX = "HOTPATH_"


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


class SettingsSource:
    """Reads `HotpathSettings` from Redis, the environment and the defaults; shared by the loops."""

    def __init__(
        self,
        client: redis.Redis | None,
        *,
        key: str = c.SETTINGS_KEY,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.env = os.environ if env is None else env
        self._reported: set[tuple[str, str, str]] = set()
        self._redis_down_reported = False
        self._lock = threading.Lock()

    def read(self) -> HotpathSettings:
        overrides: dict[str, str] = {}
        if self.client is not None:
            try:
                raw = self.client.hgetall(self.key)
                overrides = {_text(k): _text(v) for k, v in raw.items()}
                self._redis_down_reported = False
            except redis.RedisError as exc:
                if not self._redis_down_reported:
                    logger.warning(
                        "hot-path settings: %s unreadable (%s); using the environment", self.key, exc
                    )
                    self._redis_down_reported = True
        settings = HotpathSettings()
        values: dict[str, int] = {}
        for name in FIELDS:
            for source, raw_value in (
                (self.key, overrides.get(name)),
                (env_name(name), self.env.get(env_name(name))),
            ):
                if raw_value is None or raw_value.strip() == "":
                    continue
                value = self._parse(source, name, raw_value)
                if value is not None:
                    values[name] = value
                    break
        for name in overrides.keys() - set(FIELDS):
            self._report(self.key, name, overrides[name], "unknown field")
        return replace(settings, **values)

    def _parse(self, source: str, name: str, raw: str) -> int | None:
        low, high = BOUNDS[name]
        try:
            value = int(raw.strip())
        except ValueError:
            self._report(source, name, raw, "not an integer")
            return None
        if not low <= value <= high:
            self._report(source, name, raw, f"outside {low}..{high}")
            return None
        return value

    def _report(self, source: str, name: str, raw: str, why: str) -> None:
        with self._lock:
            if (source, name, raw) in self._reported:
                return
            self._reported.add((source, name, raw))
        logger.error("hot-path settings: ignoring %s %s=%r (%s)", source, name, raw[:100], why)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
