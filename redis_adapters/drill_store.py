"""The fault drill in Redis (services/usecases/drill.py): one hash, record id -> the drill's end (epoch ms).

Each record ends on its own time: the worker's check compares it with the Redis server's
clock read in the same call, and an ended entry is dropped whenever the drill is read or
changed. The hash expires with its last entry, so nothing is left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import cast

import redis

from redis_adapters.lua_scripts import lua_source
from services.domain.errors import QueueUnavailable
from services.usecases.drill import DrilledRecord

log = logging.getLogger(__name__)

#: HMGET the records' ends and TIME, in one call: the drill holds a record while its end > now
#: (server clock); returns the ids it holds. ARGV: the record ids (at least one).
_CHECK = lua_source("redis_adapters", "drill_check")

#: Drop ended entries; expire the hash with its last entry. KEYS: drill hash.
_PRUNE = lua_source("redis_adapters", "drill_prune")


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise QueueUnavailable(f"fault drill unavailable: {exc}") from exc


class RedisFaultDrill:
    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key
        self._check = client.register_script(_CHECK)
        self._prune = client.register_script(_PRUNE)
        self._warned = False

    def add(self, record_ids: Sequence[int], until: datetime) -> None:
        end_ms = int(until.timestamp() * 1000)
        with _errors():
            self.client.hset(self.key, mapping=dict.fromkeys(map(str, record_ids), end_ms))
            self._prune(keys=[self.key])

    def remove(self, record_ids: Sequence[int] | None) -> list[int]:
        with _errors():
            present = {int(r) for r, _ in self._entries()}
            gone = sorted(present if record_ids is None else present & set(record_ids))
            if gone:
                self.client.hdel(self.key, *map(str, gone))
        return gone

    def active(self) -> list[DrilledRecord]:
        with _errors():
            entries = self._entries()
        return sorted(
            (DrilledRecord(int(r), datetime.fromtimestamp(int(v) / 1000, UTC)) for r, v in entries),
            key=lambda d: d.record_id,
        )

    def _entries(self) -> list[tuple[bytes, bytes]]:
        flat = cast(list[bytes], self._prune(keys=[self.key]))
        return list(zip(flat[::2], flat[1::2], strict=True))

    def fails(self, record_id: int) -> bool:
        """Is the record in the drill now? (`held` of one record.)"""
        return record_id in self.held([record_id])

    def held(self, record_ids: Sequence[int]) -> set[int]:
        """Which of the records are in the drill now, in one call: the worker asks before each
        generation (for a group's records at once, services/usecases/report_groups.py). Redis
        unreachable means no drill (logged once): a drill must never fail a job by accident."""
        if not record_ids:
            return set()
        try:
            held = {int(r) for r in self._check(keys=[self.key], args=list(record_ids))}
        except (redis.RedisError, OSError) as exc:
            if not self._warned:
                log.warning("fault drill not readable (%s): no record is drilled meanwhile", exc)
                self._warned = True
            return set()
        self._warned = False
        return held
