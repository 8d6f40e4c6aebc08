"""Fixtures for broker tests: brokers on the test Redis and in-process workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from sqlalchemy.orm import Session, sessionmaker

from actors import bootstrap
from actors.bootstrap import default_middleware
from actors.report import generate_report
from config.settings import Settings
from redis_adapters.queues import REPORT_ACTOR_NAME, REPORT_QUEUE_NAME
from redis_adapters.report_codec import ReportCodec
from tests.support.actors import declare_actor

#: Short timings so reaper and delay tests run in seconds.
FAST_BROKER = {"heartbeat_timeout_ms": 2_000, "heartbeat_interval_ms": 250, "delay_poll_ms": 50}

BrokerFactory = Callable[..., RedisListBroker]
WorkerFactory = Callable[..., dramatiq.Worker]


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
        broker = RedisListBroker(
            middleware=default_middleware(),
            codecs={REPORT_QUEUE_NAME: ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)},
            **settings,  # type: ignore[arg-type]
        )
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

    def make(broker: dramatiq.Broker, threads: int = 2, **options: Any) -> dramatiq.Worker:
        worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100, **options)
        worker.start()
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop(timeout=10_000)


@pytest.fixture
def worker_services() -> Iterator[bootstrap.WorkerServices]:
    """What the actors of a worker process use (actors/bootstrap.py), built on the test servers
    (tests/conftest.py points DATABASE_URL and REDIS_URL at them) and installed for this test."""
    made = bootstrap.build_services(Settings.from_env())
    bootstrap.install_services(made)
    yield made
    bootstrap.install_services(None)
    made.session_factory.kw["bind"].dispose()


@pytest.fixture
def report_broker(make_broker: BrokerFactory, worker_services: bootstrap.WorkerServices) -> RedisListBroker:
    """A fresh broker with the real report actor (its function and options) declared on it."""
    broker = make_broker()
    declare_actor(
        generate_report.fn,
        broker,
        actor_name=generate_report.actor_name,
        queue_name=generate_report.queue_name,
        **generate_report.options,
    )
    return broker


@pytest.fixture
def report_worker(
    report_broker: RedisListBroker, session_factory: sessionmaker[Session]
) -> Iterator[dramatiq.Worker]:
    worker = dramatiq.Worker(report_broker, worker_threads=2, worker_timeout=100)
    worker.start()
    yield worker
    worker.stop(timeout=10_000)
