"""What the broker's tests share: short timings, factory types, typed Redis replies, a closed port."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dramatiq
from listbroker import RedisListBroker

#: Short timings so reaper and delay tests run in seconds.
FAST_BROKER: dict[str, Any] = {
    "heartbeat_timeout_ms": 2_000,
    "heartbeat_interval_ms": 250,
    "delay_poll_ms": 50,
}

#: A Redis URL on a port where nothing listens (port 1): every connection is refused.
CLOSED_REDIS_URL = "redis://127.0.0.1:1/0"

BrokerFactory = Callable[..., RedisListBroker]
WorkerFactory = Callable[..., dramatiq.Worker]


def as_bytes(value: object) -> bytes:
    """A reply of a client without decode_responses: bytes (redis-py types it bytes | str)."""
    assert isinstance(value, bytes), value
    return value


def bytes_list(values: Iterable[object]) -> list[bytes]:
    return [as_bytes(value) for value in values]


def bytes_map(values: Mapping[Any, Any]) -> dict[bytes, bytes]:
    return {as_bytes(key): as_bytes(value) for key, value in values.items()}
