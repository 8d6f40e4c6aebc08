"""The keys that mark a Redis db index as the tests' own, and a cleaner that keeps them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import redis

from scripts.servers import REDIS_LOCK_KEY, REDIS_OWNER_KEY

__all__ = ["MARKER_KEYS", "REDIS_LOCK_KEY", "REDIS_OWNER_KEY", "clean_redis"]

#: Never deleted: the owner marker (tests/conftest.py sets it) and the run lock (scripts/servers.py).
MARKER_KEYS = frozenset({REDIS_OWNER_KEY.encode(), REDIS_LOCK_KEY.encode()})


def clean_redis(client: redis.Redis) -> None:
    """Delete every key of our own test db index, except the markers that make it ours."""
    keys = [k for k in client.scan_iter(count=1000) if k not in MARKER_KEYS]
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


def as_bytes(value: object) -> bytes:
    """A reply of a client without decode_responses: bytes (redis-py types it bytes | str)."""
    assert isinstance(value, bytes), value
    return value


def bytes_list(values: Iterable[object]) -> list[bytes]:
    return [as_bytes(value) for value in values]


def bytes_map(values: Mapping[Any, Any]) -> dict[bytes, bytes]:
    return {as_bytes(key): as_bytes(value) for key, value in values.items()}
