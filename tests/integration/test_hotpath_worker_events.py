"""The report worker logs its outcomes to the event log: generated, a failed attempt, dead-lettered."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from actors import bootstrap
from actors.report import generate_report, mark_record_failed
from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_message import ReportQueueMessage
from services.domain.errors import ServiceError
from services.domain.events import Event, report_generated
from services.domain.status import RecordStatus
from services.usecases import reports
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import BrokerFactory, WorkerFactory

QUEUE = EventLogKeys().queue


def logged(client: redis.Redis) -> list[Event]:
    """The events waiting in the log queue, oldest first."""
    return [Event.decode(raw) for raw in reversed(client.lrange(QUEUE, 0, -1))]


def committed(engine: Engine, event_type: str) -> list[tuple[int, str, dict[str, object]]]:
    """(record, actor, data) of the `event_type` events stored by their change's transaction
    (services/usecases/change_events.py: status 5 commits with its dead letter's event)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT record_id, actor, data FROM event_log WHERE event_type = :t ORDER BY occurred_at"),
            {"t": event_type},
        ).all()
    return [(int(r.record_id), str(r.actor), dict(r.data)) for r in rows]


@pytest.mark.usefixtures("worker_services")
def test_outcomes_outside_a_worker(
    make_record: Callable[..., int], redis_client: redis.Redis, engine: Engine
) -> None:
    ok = make_record(RecordStatus.GENERATING)
    broken = make_record(RecordStatus.GENERATING, answers={101: 1})
    generate_report.fn(ok)
    with pytest.raises(ServiceError):
        generate_report.fn(broken)
    mark_record_failed(dramatiq.Message(REPORT_QUEUE_NAME, generate_report.actor_name, (broken,), {}, {}))
    events = logged(redis_client)
    assert [(e.event_type, e.record_id, e.actor) for e in events] == [
        ("report.generated", ok, "worker"),
        ("report.generation_failed", broken, "worker"),
    ]
    assert events[1].data["attempt"] is None  # no current message outside a worker
    assert events[1].data["error"].startswith("ServiceError: ")
    assert committed(engine, "report.dead_lettered") == [
        (broken, "worker", {"retries": MAX_RETRY_COUNT, "statusSet": True})
    ]
    # A dead letter that changes nothing (the record is no longer in 3) is logged through Redis.
    mark_record_failed(dramatiq.Message(REPORT_QUEUE_NAME, generate_report.actor_name, (broken,), {}, {}))
    assert [(e.event_type, e.data) for e in logged(redis_client)[2:]] == [
        ("report.dead_lettered", {"retries": MAX_RETRY_COUNT, "statusSet": False})
    ]


@pytest.mark.usefixtures("worker_services")
def test_a_worker_logs_the_attempt_that_failed_and_the_dead_letter(
    make_broker: BrokerFactory,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    redis_client: redis.Redis,
    engine: Engine,
) -> None:
    broker: RedisListBroker = make_broker()
    declare_actor(
        generate_report.fn,
        broker,
        actor_name=generate_report.actor_name,
        queue_name=generate_report.queue_name,
        **generate_report.options,
    )
    ok = make_record(RecordStatus.GENERATING)
    broken = make_record(RecordStatus.GENERATING, answers={})
    redis_client.lpush(
        REPORT_QUEUE_KEY,
        ReportQueueMessage.new(ok).encode(),
        ReportQueueMessage(broken, MAX_RETRY_COUNT, "2025-01-15T10:30:00").encode(),
    )
    make_worker(broker, threads=1)
    broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    events = {(e.event_type, e.record_id): e.data for e in logged(redis_client)}
    assert events[("report.generated", ok)] == {"attempt": 1}
    assert events[("report.generation_failed", broken)]["attempt"] == MAX_RETRY_COUNT + 1
    assert committed(engine, "report.dead_lettered") == [
        (broken, "worker", {"retries": MAX_RETRY_COUNT, "statusSet": True})
    ]


def _completed_at(engine: Engine, record_id: int) -> datetime:
    with engine.connect() as conn:
        at = conn.execute(
            text("SELECT completed_at FROM assessment_records WHERE id = :id"), {"id": record_id}
        ).scalar_one()
    assert isinstance(at, datetime)
    return at


def _stored_generated(engine: Engine, record_id: int) -> list[tuple[uuid.UUID, datetime, dict[str, object]]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, occurred_at, data FROM event_log"
                " WHERE record_id = :id AND event_type = 'report.generated'"
            ),
            {"id": record_id},
        ).all()
    return [(row[0], row[1], row[2]) for row in rows]


@pytest.mark.usefixtures("event_log")
def test_a_job_that_finds_its_report_made_logs_that_reports_event_once(
    report_broker: RedisListBroker,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    worker_services: bootstrap.WorkerServices,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    engine: Engine,
) -> None:
    """A worker killed after its report's commit and before its event: the redelivered job (and
    any other job of the record) finds status 4 and logs that report's event, stored once
    (found by the soak: the event was lost with the worker)."""
    record = make_record(RecordStatus.GENERATING)
    # The killed attempt: the generation committed, the job never logged its event.
    assert reports.generate_one(worker_services.uow(), record).outcome is reports.GenerationOutcome.GENERATED
    assert logged(redis_client) == []
    # Its redelivery, and a second job of the record (the reconciler's, an admin's).
    redis_client.lpush(
        REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode(), ReportQueueMessage.new(record).encode()
    )
    make_worker(report_broker, threads=2)
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)

    completed_at = _completed_at(engine, record)
    expected = report_generated(record, completed_at)
    events = [e for e in logged(redis_client) if e.record_id == record]
    assert [(e.event_type, e.id, e.occurred_at) for e in events] == [
        ("report.generated", expected.id, completed_at)
    ] * 2
    assert all(e.data.get("foundGenerated") is True for e in events)

    consumer = EventLogConsumer(redis_client, session_factory)
    assert consumer.run_once().taken == 2
    stored = _stored_generated(engine, record)
    assert [(row[0], row[1]) for row in stored] == [(expected.id, completed_at)]


@pytest.mark.usefixtures("event_log")
def test_a_redelivered_job_logs_the_same_event_as_the_attempt_that_generated(
    report_broker: RedisListBroker,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    engine: Engine,
) -> None:
    """The event of a report already logged is not stored again by a later job of the record; a
    regeneration is a new report, a new event."""
    record = make_record(RecordStatus.GENERATING)
    make_worker(report_broker, threads=1)
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    first_report = _completed_at(engine, record)
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)

    consumer = EventLogConsumer(redis_client, session_factory)
    consumer.run_once()
    stored = _stored_generated(engine, record)
    assert [(row[1], row[2]) for row in stored] == [(first_report, {"attempt": 1})]

    # Regenerated (back to 3, as the admin's regeneration sets it) and generated again.
    with engine.begin() as conn:
        conn.execute(text("UPDATE assessment_records SET status = 3 WHERE id = :id"), {"id": record})
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    consumer.run_once()
    second_report = _completed_at(engine, record)
    assert second_report > first_report
    assert sorted(row[1] for row in _stored_generated(engine, record)) == [first_report, second_report]
