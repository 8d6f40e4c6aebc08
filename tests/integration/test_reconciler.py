"""The reconciler on real PostgreSQL and Redis: every record in status 3 ends with a job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from listbroker.scripts import DEAD_MARK
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from actors import bootstrap
from actors.report import generate_report
from config.settings import Settings
from reconciler.loop import STATS_KEY, Reconciler
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    REPORT_ACTOR_NAME,
    REPORT_JOBS_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
)
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.errors import DatabaseUnavailable
from services.persistence.uow import UnitOfWork
from services.usecases import reconcile
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import WorkerFactory
from tests.support.record_state import status_of

GRACE_MS = 5_000


def age(session_factory: sessionmaker[Session], *record_ids: int, seconds: int = 60) -> None:
    """Make records look unchanged for `seconds` (older than the grace period)."""
    with session_factory() as session:
        session.execute(
            text(
                "UPDATE assessment_records SET updated_at = now() - make_interval(secs => :s)"
                " WHERE id = ANY(:ids)"
            ),
            {"s": seconds, "ids": list(record_ids)},
        )
        session.commit()


def queued_ids(client: redis.Redis) -> list[int]:
    return sorted(ReportQueueMessage.decode(p).record_id for p in client.lrange(REPORT_QUEUE_KEY, 0, -1))


def reconciler(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], batch: int = 1_000
) -> Reconciler:
    return Reconciler(
        redis_client, session_factory, Settings(reconcile_grace_ms=GRACE_MS, reconcile_batch=batch)
    )


def test_a_record_in_status_3_without_a_job_gets_one(
    make_record: Callable[..., int], session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    lost, has_job, _fresh, done, deleted = (
        make_record(status=3),
        make_record(status=3),
        make_record(status=3),
        make_record(status=4),
        make_record(status=3, deleted=True),
    )
    age(session_factory, lost, has_job, done, deleted)
    RedisReportQueue(redis_client).enqueue(has_job)
    healer = reconciler(redis_client, session_factory)
    report = healer.run_once()
    assert report.owner
    assert report.enqueued == [lost]
    assert queued_ids(redis_client) == sorted([lost, has_job])  # `fresh` is within its grace period
    message = ReportQueueMessage.decode(redis_client.lrange(REPORT_QUEUE_KEY, 0, 0)[0])
    assert (message.record_id, message.retry_count) == (lost, 0)
    # A second pass finds every record with its job.
    second = healer.run_once()
    assert second.owner
    assert second.enqueued == []
    stats = redis_client.hgetall(STATS_KEY)
    assert stats[b"total_enqueued"] == b"1"
    assert stats[b"last_enqueued"] == b"0"


def test_redis_losing_its_data_is_healed_page_by_page(
    make_record: Callable[..., int], session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    ids = [make_record(status=3) for _ in range(7)]
    RedisReportQueue(redis_client).enqueue_many(ids)
    age(session_factory, *ids)
    redis_client.delete(REPORT_QUEUE_KEY, REPORT_JOBS_KEY)  # as after a restart without persistence
    report = reconciler(redis_client, session_factory, batch=3).run_once()
    assert report.scanned == 7
    assert sorted(report.enqueued) == ids
    assert queued_ids(redis_client) == ids


def test_a_dead_letter_whose_status_write_failed_ends_in_status_5(
    make_record: Callable[..., int], session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    record_id = make_record(status=3)
    age(session_factory, record_id)
    redis_client.hset(REPORT_JOBS_KEY, str(record_id), DEAD_MARK)  # what SETTLE leaves after such a failure
    report = reconciler(redis_client, session_factory).run_once()
    assert report.failed == [record_id]
    assert report.enqueued == []
    assert status_of(session_factory, record_id) == 5
    assert redis_client.hget(REPORT_JOBS_KEY, str(record_id)) is None
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


def test_status_5_is_not_written_over_a_record_changed_since_it_was_read(
    make_record: Callable[..., int], session_factory: sessionmaker[Session]
) -> None:
    record_id = make_record(status=3)
    age(session_factory, record_id)
    (seen,) = reconcile.records_owed(UnitOfWork(session_factory), grace_ms=GRACE_MS, after_id=0, limit=10)
    age(session_factory, record_id, seconds=1)  # an admin regenerated it meanwhile
    assert reconcile.mark_failed_unless_changed(UnitOfWork(session_factory), [seen]) == []
    assert status_of(session_factory, record_id) == 3


def test_one_reconciler_works_at_a_time(
    make_record: Callable[..., int], session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    record_id = make_record(status=3)
    age(session_factory, record_id)
    first, second = reconciler(redis_client, session_factory), reconciler(redis_client, session_factory)
    assert first.run_once().owner
    assert not second.run_once().owner
    first.close()
    assert second.run_once().owner
    assert queued_ids(redis_client) == [record_id]


def test_a_job_dead_lettered_while_the_database_is_down_ends_in_status_5(
    make_record: Callable[..., int],
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    broker: RedisListBroker,
    make_worker: WorkerFactory,
) -> None:
    """The whole path: attempts fail, the status-5 write fails, the job is still dead-lettered,
    and the reconciler sets status 5 once the database answers."""

    def database_down(message: dramatiq.Message[Any]) -> None:
        raise DatabaseUnavailable("database unreachable")  # as the real hook's unit of work raises it

    def generate(record_id: int) -> None:
        raise RuntimeError("generation failed")

    declare_actor(
        generate,
        broker,
        actor_name=REPORT_ACTOR_NAME,
        queue_name=REPORT_QUEUE_NAME,
        retry_delays=(10, 10, 10),
        on_dead_letter=database_down,
    )
    record_id = make_record(status=3)
    RedisReportQueue(redis_client).enqueue(record_id)
    make_worker(broker)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 1
    assert status_of(session_factory, record_id) == 3
    age(session_factory, record_id)
    assert reconciler(redis_client, session_factory).run_once().failed == [record_id]
    assert status_of(session_factory, record_id) == 5


def test_a_dead_letter_that_cannot_read_the_job_index_leaves_status_5_to_the_reconciler(
    make_record: Callable[..., int],
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    broker: RedisListBroker,
    make_worker: WorkerFactory,
    worker_services: bootstrap.WorkerServices,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report actor's own hook, Redis failing its index read: the first of two jobs of a
    record must not set 5 under the other (found by the seeded soak: a regenerated job still had
    attempts left); the last one's dead mark has the reconciler set 5."""

    def unreadable(record_id: int) -> int:
        raise redis.ConnectionError("Redis failing")

    monkeypatch.setattr(worker_services.report_queue, "jobs_alive", unreadable)
    declare_actor(
        generate_report.fn,
        broker,
        actor_name=generate_report.actor_name,
        queue_name=generate_report.queue_name,
        **{**generate_report.options, "retry_delays": (10, 10, 10)},
    )
    record_id = make_record(status=3, answers={})  # every attempt fails: no answers
    queue = RedisReportQueue(redis_client)
    queue.enqueue(record_id)
    queue.enqueue(record_id)  # a second job of the record (an admin's regeneration)
    make_worker(broker)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 2
    assert status_of(session_factory, record_id) == 3
    assert redis_client.hget(REPORT_JOBS_KEY, str(record_id)) == DEAD_MARK.encode()
    age(session_factory, record_id)
    assert reconciler(redis_client, session_factory).run_once().failed == [record_id]
    assert status_of(session_factory, record_id) == 5
