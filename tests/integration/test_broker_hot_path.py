"""The broker's hot path (enqueue and fetch on its own connections) survives what the client does.

On a private Redis server: a flushed script cache, and a restart that leaves idle
connections dead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from listbroker.connections import IDLE_CHECK_SECONDS
from listbroker.consumer import RedisListConsumer

from actors.bootstrap import default_middleware
from tests.support.processes import RedisServer, wait_until


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


@pytest.mark.parametrize(
    ("setting", "refusing", "serving"),
    [
        # A master cut off from its replicas (the soak on Sentinel): every write refused.
        ("min-replicas-to-write", "1", "0"),
        # A server at maxmemory: OOM on every write that may grow it.
        ("maxmemory", "1", "0"),
    ],
)
def test_a_worker_whose_server_refuses_writes_for_a_while_goes_on_taking_jobs(
    private_broker: RedisListBroker,
    server: RedisServer,
    caplog: pytest.LogCaptureFixture,
    setting: str,
    refusing: str,
    serving: str,
) -> None:
    """An error reply of a server that cannot serve for now is a connection error (the consumer
    waits it out with backoff); found by the soak on Sentinel: NOREPLICAS was an
    "unexpected error", closing the consumer raised it again, and the consumer thread ended
    while its worker process lived on, taking no job."""
    done: list[int] = []

    @dramatiq.actor(broker=private_broker, queue_name="hot", actor_name="noted")
    def noted(n: int) -> None:
        done.append(n)

    admin = redis.Redis.from_url(server.url)
    worker = dramatiq.Worker(private_broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        noted.send(1)
        wait_until(lambda: done == [1], timeout=30, what="the first job")
        with caplog.at_level(logging.WARNING):
            admin.config_set(setting, refusing)
            try:
                # The broker's consumer backs off (its warning); Dramatiq never restarts it.
                wait_until(
                    lambda: any("Consumer of hot:queue" in r.getMessage() for r in caplog.records),
                    timeout=30,
                    what="the consumer refused",
                )
            finally:
                admin.config_set(setting, serving)
        assert not any("unexpected error" in r.getMessage() for r in caplog.records)
        assert not [r for r in caplog.records if r.name.startswith("dramatiq.worker.ConsumerThread")]
        noted.send(2)
        wait_until(lambda: done == [1, 2], timeout=30, what="a job after the refusals")
    finally:
        worker.stop(timeout=10_000)
        admin.close()
