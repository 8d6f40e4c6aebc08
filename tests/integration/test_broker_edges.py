"""The broker with any Dramatiq encoder, and no heartbeat entry left for a consumer that is gone."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.encoder import PickleEncoder
from dramatiq.errors import ConnectionClosed
from listbroker import HEARTBEATS_KEY, RedisListBroker

from scripts.faults import FaultProxy
from tests.broker_fixtures import BrokerFactory, WorkerFactory
from tests.support.actors import declare_actor
from tests.support.processes import wait_until
from tests.support.redis_keys import as_bytes


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

    actor = declare_actor(handle, broker, queue_name="pickled", max_retries=1, min_backoff=10, max_backoff=10)
    assert b"\x80" in pickle.dumps(value)  # not UTF-8 once pickled
    actor.send(value, False)
    actor.send_with_options(args=(value, False), delay=50)
    actor.send(value, True)
    make_worker(broker)
    broker.join("pickled", timeout=20_000)
    assert seen == [value] * 4  # two successes, one failure and its retry
    (dead,) = redis_client.lrange("pickled:queue:dead", 0, -1)
    assert dramatiq.Message[Any].decode(as_bytes(dead)).args == (value, True)


def test_no_heartbeat_is_left_for_a_consumer_that_failed_to_start(
    make_broker: BrokerFactory, redis_url: str, redis_client: redis.Redis
) -> None:
    """With Redis down, every restart of a consumer thread failed in `consume` yet stayed
    registered, and was heartbeated forever once Redis was back: one empty entry each."""
    proxy = FaultProxy(redis_url)
    try:
        broker = make_broker(
            client=redis.Redis.from_url(proxy.url, socket_timeout=2, socket_connect_timeout=1)
        )
        broker.declare_queue("beats")
        live = broker.consume("beats", prefetch=1, timeout=100)
        proxy.down()
        for _ in range(3):
            with pytest.raises(ConnectionClosed):
                broker.consume("beats", prefetch=1, timeout=100)
        proxy.up()
        time.sleep(0.6)  # two heartbeat intervals of the test broker
        wait_until(
            lambda: redis_client.zrange(HEARTBEATS_KEY, 0, -1) == [live.processing_key.encode()],
            timeout=30,
            what="only the live consumer's heartbeat",
        )
        live.close()
        wait_until(
            lambda: redis_client.zcard(HEARTBEATS_KEY) == 0, timeout=30, what="the closed consumer's release"
        )
    finally:
        proxy.close()
