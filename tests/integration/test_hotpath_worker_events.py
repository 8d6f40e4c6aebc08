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

from actors import bootstrap
from actors.report import generate_report, mark_record_failed
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_message import ReportQueueMessage
from services.domain.errors import ServiceError
from services.domain.events import Event
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
        ("report.generation_failed", broken, "worker"),
    ]
    assert events[0].data["attempt"] is None  # no current message outside a worker
    assert events[0].data["error"].startswith("ServiceError: ")
    # The report's event was committed with it.
    assert committed(engine, "report.generated") == [(ok, "worker", {"attempt": None})]
    assert committed(engine, "report.dead_lettered") == [
        (broken, "worker", {"retries": MAX_RETRY_COUNT, "statusSet": True})
    ]
    # A dead letter that changes nothing (the record is no longer in 3) is logged through Redis.
    mark_record_failed(dramatiq.Message(REPORT_QUEUE_NAME, generate_report.actor_name, (broken,), {}, {}))
    assert [(e.event_type, e.data) for e in logged(redis_client)[1:]] == [
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
    assert committed(engine, "report.generated") == [(ok, "worker", {"attempt": 1})]
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
def test_a_report_commits_with_its_event_so_a_job_killed_after_the_commit_loses_nothing(
    report_broker: RedisListBroker,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    worker_services: bootstrap.WorkerServices,
    redis_client: redis.Redis,
    engine: Engine,
) -> None:
    """The generation's own transaction stores `report.generated`, at the report's moment: a
    worker killed right after the commit leaves the event stored (the soak once lost it with
    the worker, between the commit and the event's push to Redis), and the redelivered job and
    any other job of the record, finding status 4, add nothing."""
    record = make_record(RecordStatus.GENERATING)
    # The killed attempt: the generation committed, nothing ran after it.
    generated = reports.generate_one(worker_services.uow(), record, attempt=2)
    assert generated.outcome is reports.GenerationOutcome.GENERATED
    completed_at = _completed_at(engine, record)
    assert [(row[1], row[2]) for row in _stored_generated(engine, record)] == [(completed_at, {"attempt": 2})]
    # Its redelivery, and a second job of the record (the reconciler's, an admin's).
    redis_client.lpush(
        REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode(), ReportQueueMessage.new(record).encode()
    )
    make_worker(report_broker, threads=2)
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert [e for e in logged(redis_client) if e.record_id == record] == []
    assert [(row[1], row[2]) for row in _stored_generated(engine, record)] == [(completed_at, {"attempt": 2})]
    assert _completed_at(engine, record) == completed_at


def test_a_generation_that_does_not_commit_stores_no_event(
    make_record: Callable[..., int], worker_services: bootstrap.WorkerServices, engine: Engine
) -> None:
    """The event is the report's: when the write fails (here a trigger refuses the summary of
    one record), the group's transaction stores no report and no event."""
    record, other = make_record(RecordStatus.GENERATING), make_record(RecordStatus.GENERATING)
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION refuse_summary() RETURNS trigger LANGUAGE plpgsql AS"
                f" $$BEGIN IF NEW.record_id = {record} THEN RAISE EXCEPTION 'refused'; END IF;"
                " RETURN NEW; END$$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER refuse_summary BEFORE INSERT ON report_summaries"
                " FOR EACH ROW EXECUTE FUNCTION refuse_summary()"
            )
        )
    try:
        with pytest.raises(Exception, match="refused"):
            reports.generate_reports(worker_services.uow(), [record, other], attempts=[1, 1])
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER refuse_summary ON report_summaries"))
            conn.execute(text("DROP FUNCTION refuse_summary()"))
    assert _stored_generated(engine, record) == _stored_generated(engine, other) == []
    with engine.connect() as conn:
        statuses = conn.execute(
            text("SELECT status FROM assessment_records WHERE id = ANY(:ids)"), {"ids": [record, other]}
        ).scalars()
        assert set(statuses) == {RecordStatus.GENERATING}
    # The same records, nothing refused: reports and events together.
    reports.generate_reports(worker_services.uow(), [record, other], attempts=[1, 3])
    assert [row[2] for row in _stored_generated(engine, record)] == [{"attempt": 1}]
    assert [row[2] for row in _stored_generated(engine, other)] == [{"attempt": 3}]


@pytest.mark.usefixtures("event_log")
def test_each_report_has_one_event_with_its_jobs_attempt_and_a_regeneration_a_new_one(
    report_broker: RedisListBroker,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    redis_client: redis.Redis,
    engine: Engine,
) -> None:
    """A later job of the record stores no second event of the report; a regeneration is a new
    report, a new event."""
    record = make_record(RecordStatus.GENERATING)
    make_worker(report_broker, threads=1)
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage(record, 1, "2025-01-15T10:30:00").encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    first_report = _completed_at(engine, record)
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    # The job's second attempt (retry count 1) made it.
    assert [(row[1], row[2]) for row in _stored_generated(engine, record)] == [(first_report, {"attempt": 2})]

    # Regenerated (back to 3, as the admin's regeneration sets it) and generated again.
    with engine.begin() as conn:
        conn.execute(text("UPDATE assessment_records SET status = 3 WHERE id = :id"), {"id": record})
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record).encode())
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    second_report = _completed_at(engine, record)
    assert second_report > first_report
    assert sorted(row[1] for row in _stored_generated(engine, record)) == [first_report, second_report]
    assert [e for e in logged(redis_client) if e.event_type == "report.generated"] == []
