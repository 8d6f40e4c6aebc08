"""The broker's own fixtures: a Redis db index of the tests' own, brokers on it, in-process workers.

The suite needs nothing but this library, dramatiq, redis, pytest and Hypothesis (the
application's `make test` runs it in a virtualenv holding only those:
scripts/broker_suite.py). Redis comes from TEST_REDIS_URL (default redis://127.0.0.1:6379/15).

The db index must be the tests' own: empty, or holding one of the marker keys named in
LISTBROKER_TEST_KEEP (comma-separated; default `listbroker:test-db`), which are never
deleted. Every other key is deleted before and after each test. Without a reachable
server the tests are skipped, or fail when LISTBROKER_REQUIRE_REDIS=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker, default_middleware
from support import FAST_BROKER, BrokerFactory, WorkerFactory

TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
KEEP = tuple(k for k in os.environ.get("LISTBROKER_TEST_KEEP", "listbroker:test-db").split(",") if k)
REQUIRE = os.environ.get("LISTBROKER_REQUIRE_REDIS") == "1"


def clean(client: redis.Redis) -> None:
    keep = {k.encode() for k in KEEP}
    keys = [k for k in client.scan_iter(count=1000) if k not in keep]
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=2)
        client.ping()
    except redis.RedisError as exc:
        if REQUIRE:
            pytest.fail(f"Redis unavailable: {exc}", pytrace=False)
        pytest.skip(f"Redis unavailable: {exc}")
    if not any(client.exists(k) for k in KEEP):
        if client.dbsize() > 0:
            pytest.fail(f"{TEST_REDIS_URL} holds keys that are not the tests'", pytrace=False)
        client.set(KEEP[0], "1")
    return TEST_REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    clean(client)
    yield client
    clean(client)
    client.close()


@pytest.fixture
def make_broker(redis_url: str, redis_client: redis.Redis) -> Iterator[BrokerFactory]:
    """Brokers on the test Redis; the first one made is also Dramatiq's global broker."""
    made: list[RedisListBroker] = []
    previous = dramatiq.get_broker()

    def make(**options: object) -> RedisListBroker:
        settings: dict[str, object] = {
            "client": redis.Redis.from_url(redis_url, socket_timeout=10),
            **FAST_BROKER,
            **options,
        }
        broker = RedisListBroker(middleware=default_middleware(), **settings)  # type: ignore[arg-type]
        if not made:
            dramatiq.set_broker(broker)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.close()
    dramatiq.set_broker(previous)


@pytest.fixture
def broker(make_broker: BrokerFactory) -> RedisListBroker:
    return make_broker()


@pytest.fixture
def make_worker() -> Iterator[WorkerFactory]:
    started: list[dramatiq.Worker] = []

    def make(broker: dramatiq.Broker, threads: int = 2, **options: object) -> dramatiq.Worker:
        worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100, **options)  # type: ignore[arg-type]
        worker.start()
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop(timeout=10_000)
