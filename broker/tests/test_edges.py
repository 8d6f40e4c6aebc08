"""The broker with any Dramatiq encoder: pickled (non-UTF-8) messages keep their bytes."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.encoder import PickleEncoder
from listbroker import ActorSpec, RedisListBroker
from support import WorkerFactory, as_bytes


@pytest.fixture
def pickle_encoder() -> Iterator[None]:
    previous = dramatiq.get_encoder()
    dramatiq.set_encoder(PickleEncoder())
    yield
    dramatiq.set_encoder(previous)


def test_a_pickle_encoded_queue_round_trips_bytes_that_are_not_utf8(
    pickle_encoder: None, broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    """Pickled messages are not UTF-8 text: enqueue, delay, retry and dead letter keep them as bytes."""
    seen: list[Any] = []
    value = {"blob": bytes(range(256)), "text": "生成中"}

    def handle(payload: dict[str, Any], fail: bool) -> None:
        seen.append(payload)
        if fail:
            raise RuntimeError("fails on purpose")

    actor = ActorSpec(
        handle,
        actor_name="handle",
        queue_name="pickled",
        options={"max_retries": 1, "min_backoff": 10, "max_backoff": 10},
    ).declare(broker)
    assert b"\x80" in pickle.dumps(value)  # not UTF-8 once pickled
    actor.send(value, False)
    actor.send_with_options(args=(value, False), delay=50)
    actor.send(value, True)
    make_worker(broker)
    broker.join("pickled", timeout=20_000)
    assert seen == [value] * 4  # two successes, one failure and its retry
    (dead,) = redis_client.lrange("pickled:queue:dead", 0, -1)
    assert dramatiq.Message[Any].decode(as_bytes(dead)).args == (value, True)
