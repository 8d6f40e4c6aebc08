"""Run-time settings of the hot-path loops, changeable while they run (no restart).

Re-read at the start of every cycle, each field from the first source that has a valid
value: the Redis hash `hotpath:settings` (change it while running:
``redis-cli HSET hotpath:settings answers_interval_ms 500``), then the environment
(``HOTPATH_ANSWERS_INTERVAL_MS``), then the default in hotpath/constants.py.
An invalid value (not an integer, out of bounds) is logged once and ignored.

The values must also fit together (`inconsistency`): a lease must be long enough for
the largest batch at `LEASE_MS_PER_ITEM`, so a batch fits in one lease even if the
renewals made while it runs (redis_adapters/lock.py) are late. An inconsistent set is
refused as a whole, logged once, and the previous values are kept (at start-up: the
environment and defaults alone, else the defaults).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import redis
from listbroker import Backoff

from hotpath import constants as c

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

#: Lease needed per item of a batch (records for the flushers, events for the consumer).
#: A conservative rate: on a loaded 2-core machine a 5,000-record chunk of 40-field
#: answer hashes took 3.2 s to read, write and commit (0.65 ms a record); events are
#: far cheaper. Intervals need no rule: an idle loop renews its lease every
#: min(1 s, lease / 3).
LEASE_MS_PER_ITEM = 1.0
BATCH_FIELDS = ("answers_batch", "progress_batch", "events_batch")


def inconsistency(settings: HotpathSettings) -> str | None:
    """Why these settings do not fit together, or None when they do."""
    largest = max(BATCH_FIELDS, key=lambda name: getattr(settings, name))
    needed = getattr(settings, largest) * LEASE_MS_PER_ITEM
    if settings.lock_ttl_ms < needed:
        return (
            f"lock_ttl_ms={settings.lock_ttl_ms} is too short for {largest}={getattr(settings, largest)}:"
            f" a lease must be at least {LEASE_MS_PER_ITEM:g} ms per item of the largest batch"
            f" ({needed:.0f} ms)"
        )
    return None


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
        #: HOTPATH_<FIELD> values of the environment (config/settings.py reads them: `Settings.hotpath_env`).
        self.env: Mapping[str, str] = {} if env is None else env
        self._reported: set[tuple[str, str, str]] = set()
        # Read by every loop at every step: its failure is logged once, summarised, ended.
        self._unreadable = Backoff(f"hot-path settings ({key} unreadable: using the environment)", logger)
        self._lock = threading.Lock()
        #: The last consistent settings returned: kept when a change makes them inconsistent.
        self._accepted: HotpathSettings | None = None
        self._refused: set[HotpathSettings] = set()

    def read(self) -> HotpathSettings:
        """The current settings: each field from its first valid source, if they fit together."""
        candidate = self._resolve(self._overrides())
        problem = inconsistency(candidate)
        with self._lock:
            if problem is None:
                self._accepted = candidate
                return candidate
            previous = self._accepted
            first = candidate not in self._refused
            self._refused.add(candidate)
        if previous is None:
            previous = self._resolve({})
            if inconsistency(previous) is not None:
                previous = HotpathSettings()
            with self._lock:
                self._accepted = self._accepted or previous
        if first:
            logger.error("hot-path settings: refused (%s); keeping %s", problem, _changed(previous))
        return previous

    def _overrides(self) -> dict[str, str]:
        overrides: dict[str, str] = {}
        if self.client is not None:
            try:
                raw = self.client.hgetall(self.key)
                overrides = {_text(k): _text(v) for k, v in raw.items()}
            except redis.RedisError as exc:
                self._unreadable.failed(exc)
            else:
                self._unreadable.succeeded()
        return overrides

    def _resolve(self, overrides: Mapping[str, str]) -> HotpathSettings:
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


def _changed(settings: HotpathSettings) -> str:
    """The fields that differ from the defaults, for a log line."""
    default = HotpathSettings()
    changed = [f"{n}={getattr(settings, n)}" for n in FIELDS if getattr(settings, n) != getattr(default, n)]
    return ", ".join(changed) or "the defaults"


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
