"""The real report actor in a Dramatiq worker, on the real Redis and PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import cast

import dramatiq
import pytest
import redis
from listbroker import AvailabilityGate, RedisListBroker
from listbroker.scripts import DELAYED_PREFIX_LEN
from sqlalchemy.orm import Session, sessionmaker

from actors import bootstrap
from actors.report import generate_report
from config.settings import Settings
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.queue_figures import QueueFigures, queue_figures
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    INVALID_QUEUE_KEY,
    MAX_RETRY_COUNT,
    REPORT_DELAYED_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
    RETRY_DELAYS_MS,
)
from redis_adapters.report_codec import ReportCodec
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import FAST_BROKER
from tests.support.processes import row_locked, sessions_waiting_for_a_lock, wait_until
from tests.support.record_state import report_rows, report_state, status_of, wait_for_status
from tests.support.retry_clock import RetryClock, assert_schedule
from tests.support.urls import CLOSED_DATABASE_URL

MakeRecord = Callable[..., int]


def test_submitted_record_gets_its_report(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    record_id = make_record(RecordStatus.GENERATING)
    RedisReportQueue(redis_client).enqueue(record_id)
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert status_of(session_factory, record_id) == RecordStatus.COMPLETED
    assert report_rows(session_factory, record_id) == (8, 1)
    assert queue_figures(redis_client) == QueueFigures(0, 0, 0, 0, 0)


def test_message_lpushed_by_the_dotnet_producer_is_processed(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    record_id = make_record(RecordStatus.GENERATING)
    redis_client.lpush(
        REPORT_QUEUE_KEY,
        f'{{"RecordId":{record_id},"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00.1234567+08:00"}}',
    )
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert status_of(session_factory, record_id) == RecordStatus.COMPLETED


@pytest.mark.parametrize(
    "status", [RecordStatus.PENDING, RecordStatus.IN_PROGRESS, RecordStatus.COMPLETED, RecordStatus.FAILED]
)
def test_record_not_generating_is_acknowledged_and_skipped(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    status: RecordStatus,
) -> None:
    record_id = make_record(status)
    before = report_state(session_factory, record_id)
    assert before[:2] == ((8, 1) if status == RecordStatus.COMPLETED else (0, 0))
    RedisReportQueue(redis_client).enqueue(record_id)
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert status_of(session_factory, record_id) == status
    # Untouched: no report made, or the one it had kept (its rows and moment).
    assert report_state(session_factory, record_id) == before
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0


def test_poison_messages_are_quarantined_and_the_worker_goes_on(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    poison = [
        b"{not json",
        b'{"RecordId":1,"RetryCount":0}',
        b'{"RecordId":0,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":-3,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":"5","RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":5,"RetryCount":"0","EnqueueTime":"2025-01-15T10:30:00"}',
        b"[]",
    ]
    record_id = make_record(RecordStatus.GENERATING)
    redis_client.lpush(REPORT_QUEUE_KEY, *poison, ReportQueueMessage.new(record_id).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert status_of(session_factory, record_id) == RecordStatus.COMPLETED
    # Verbatim, oldest at the right like the queue itself.
    assert redis_client.lrange(INVALID_QUEUE_KEY, 0, -1) == poison[::-1]


def test_last_failure_dead_letters_and_marks_the_record_failed(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    record_id = make_record(RecordStatus.GENERATING, answers={})  # generation raises: no answers
    last = ReportQueueMessage(record_id, MAX_RETRY_COUNT, "2025-01-15T10:30:00")
    redis_client.lpush(REPORT_QUEUE_KEY, last.encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    [dead] = redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)
    # The job as it was, with why and when it died (tests/integration/test_operations.py).
    assert replace(ReportQueueMessage.decode(dead), dead=None) == last
    assert status_of(session_factory, record_id) == RecordStatus.FAILED


def test_jobs_taken_together_each_keep_their_own_outcome(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    """The jobs the worker holds go to one call and one transaction (REPORT_BATCH_SIZE): a
    record that cannot be generated fails its own job only, retried on its own schedule."""
    good = [make_record(RecordStatus.GENERATING) for _ in range(6)]
    bad = make_record(RecordStatus.GENERATING, answers={})  # generation raises: no answers
    # One LPUSH: the worker finds them all waiting and takes them together.
    jobs = [ReportQueueMessage.new(r).encode() for r in [*good[:3], bad, *good[3:]]]
    redis_client.lpush(REPORT_QUEUE_KEY, *jobs)
    for record_id in good:
        wait_for_status(session_factory, record_id, RecordStatus.COMPLETED)
        assert report_rows(session_factory, record_id) == (8, 1)
    wait_until(lambda: redis_client.zcard(REPORT_DELAYED_KEY) == 1, timeout=10, what="the bad job's retry")
    [member] = cast(list[bytes], redis_client.zrange(REPORT_DELAYED_KEY, 0, -1))
    retry = ReportQueueMessage.decode(member[DELAYED_PREFIX_LEN:])
    assert (retry.record_id, retry.retry_count) == (bad, 1)  # its first retry, on its own
    assert status_of(session_factory, bad) == RecordStatus.GENERATING
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0


def test_a_record_locked_elsewhere_waits_alone_while_the_rest_of_its_batch_is_generated(
    report_broker: RedisListBroker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    """A batch holding the job of a record locked elsewhere stays in flight until that job, run
    alone, gets the lock; the batch's other jobs are acknowledged as soon as their reports are
    committed, not held in the worker's processing list (where a crash would redeliver them)
    for as long as the lock is held."""
    locked, *free = (make_record(RecordStatus.GENERATING) for _ in range(3))
    processing = report_broker.queue_keys(REPORT_QUEUE_NAME).processing_prefix + "*"

    def in_flight() -> list[int]:
        return sorted(
            ReportQueueMessage.decode(raw).record_id
            for key in redis_client.scan_iter(match=processing)
            for raw in cast(list[bytes], redis_client.lrange(key, 0, -1))
        )

    # Started once the jobs wait: its first fetch (a prefetch of 4 for 2 threads) takes the
    # three, one batch (a worker already waiting takes the first job alone).
    worker = dramatiq.Worker(report_broker, worker_threads=2, worker_timeout=100)
    try:
        with row_locked(settings.database_url, locked):
            jobs = [ReportQueueMessage.new(r).encode() for r in [locked, *free]]
            redis_client.lpush(REPORT_QUEUE_KEY, *jobs)
            worker.start()
            for record_id in free:  # not held up by the lock (the group skips the locked row)
                wait_for_status(session_factory, record_id, RecordStatus.COMPLETED)
            wait_until(
                lambda: sessions_waiting_for_a_lock(settings.database_url) > 0,
                timeout=30,
                what="the locked record's job waiting alone on its lock",
            )
            assert status_of(session_factory, locked) == RecordStatus.GENERATING
            wait_until(lambda: in_flight() == [locked], timeout=30, what="only the locked job in flight")
            assert sessions_waiting_for_a_lock(settings.database_url) > 0  # still waiting meanwhile
        report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    finally:
        worker.stop(timeout=10_000)
    assert status_of(session_factory, locked) == RecordStatus.COMPLETED
    assert report_rows(session_factory, locked) == (8, 1)
    assert redis_client.zcard(REPORT_DELAYED_KEY) == 0  # no attempt failed


def test_a_batch_that_finds_the_database_down_goes_back_uncounted_and_closes_the_gate(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Every job of the batch finds PostgreSQL unreachable: nothing is any record's failure, so
    the batch's jobs go back to the queue uncounted, in one step, and the availability gate
    closes (its probe says the database is still down); no retry, dead letter or failure event."""
    caplog.set_level(logging.INFO)
    services = bootstrap.build_services(Settings.from_env().with_overrides(database_url=CLOSED_DATABASE_URL))
    bootstrap.install_services(services)
    broker = RedisListBroker(
        client=redis.Redis.from_url(redis_url, socket_timeout=10),
        middleware=bootstrap.default_middleware(lambda: False),
        codecs={REPORT_QUEUE_NAME: ReportCodec(REPORT_QUEUE_NAME, generate_report.actor_name)},
        **FAST_BROKER,  # type: ignore[arg-type]
    )
    declare_actor(
        generate_report.fn,
        broker,
        actor_name=generate_report.actor_name,
        queue_name=generate_report.queue_name,
        **generate_report.options,
    )
    [gate] = [m for m in broker.middleware if isinstance(m, AvailabilityGate)]
    # One LPUSH before the worker starts: its first fetch takes both (one thread: a prefetch
    # of two), one batch.
    redis_client.lpush(REPORT_QUEUE_KEY, *(ReportQueueMessage.new(r).encode() for r in (1, 2)))
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()

    def given_back() -> list[str]:
        return [r.getMessage() for r in caplog.records if "returned to the queue uncounted" in r.getMessage()]

    try:
        wait_until(lambda: gate.closings >= 1, timeout=30, what="the gate to close")
        wait_until(lambda: bool(given_back()), timeout=10, what="the batch given back")
        assert "; 2 message(s) returned to the queue uncounted" in given_back()[0]  # in one step
        figures = queue_figures(redis_client)
        assert (figures.pending, figures.delayed, figures.dead) == (2, 0, 0)
        assert redis_client.llen(EventLogKeys().queue) == 0  # no failed attempt to log
        assert not gate.is_open
    finally:
        worker.stop(timeout=10_000)
        broker.close()
        bootstrap.install_services(None)
        services.session_factory.kw["bind"].dispose()


@pytest.mark.slow
def test_full_retry_schedule_with_the_real_delays(
    report_broker: RedisListBroker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    """Seed 000: failures at RetryCount 0, 1, 2 return after exactly 10, 30, 60 s; then dead + status 5.

    The timing is what the broker recorded (each retry's due time) against when the worker
    ran each attempt (tests/support/retry_clock.py), with the documented lateness."""
    clock = RetryClock(redis_client).install(report_broker)
    worker = dramatiq.Worker(report_broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        record_id = make_record(RecordStatus.GENERATING, answers={})
        RedisReportQueue(redis_client).enqueue(record_id)
        wait_for_status(
            session_factory, record_id, RecordStatus.FAILED, timeout=sum(RETRY_DELAYS_MS) / 1000 + 60
        )
    finally:
        worker.stop(timeout=10_000)
        report_broker.middleware.remove(clock)
    assert_schedule(clock.attempts, RETRY_DELAYS_MS)
    [dead] = redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)
    assert ReportQueueMessage.decode(dead).retry_count == MAX_RETRY_COUNT
    assert ReportQueueMessage.decode(dead).record_id == record_id
