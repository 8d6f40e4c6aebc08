"""The broker's hot path (enqueue and fetch on its own connections) survives what the client does.

On a private Redis server: a flushed script cache, and a restart that leaves idle
connections dead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker, RedisListConsumer
from listbroker.connections import IDLE_CHECK_SECONDS

from actors.bootstrap import default_middleware
from tests.support.processes import RedisServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    started = RedisServer(tmp_path / "redis").start()
    yield started
    started.stop()


@pytest.fixture
def private_broker(server: RedisServer) -> Iterator[RedisListBroker]:
    broker = RedisListBroker(url=server.url, middleware=default_middleware())
    broker.declare_queue("hot")
    yield broker
    broker.close()


def message(n: int) -> dramatiq.Message[object]:
    return dramatiq.Message(queue_name="hot", actor_name="a", args=(n,), kwargs={}, options={})


def take(consumer: RedisListConsumer) -> object:
    proxy = next(consumer)
    assert proxy is not None
    consumer.ack(proxy)
    return proxy.args[0]


def test_fetch_reloads_a_flushed_script(private_broker: RedisListBroker, server: RedisServer) -> None:
    consumer = private_broker.consume("hot", prefetch=1, timeout=1000)
    private_broker.enqueue(message(1))
    assert take(consumer) == 1
    redis.Redis.from_url(server.url).script_flush()
    private_broker.enqueue(message(2))
    assert take(consumer) == 2
    consumer.close()


def test_enqueue_after_a_restart_uses_a_live_connection(
    private_broker: RedisListBroker, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    private_broker.enqueue(message(1))  # leaves an idle hot-path connection behind
    server.stop()
    server.start()  # same port, empty
    monkeypatch.setattr("listbroker.connections.IDLE_CHECK_SECONDS", -1.0)  # as if idle for long
    assert IDLE_CHECK_SECONDS > 0
    private_broker.enqueue(message(2))
    assert redis.Redis.from_url(server.url).llen("hot:queue") == 1
