"""The report worker logs its outcomes to the event log: generated, a failed attempt, dead-lettered."""

from __future__ import annotations

from collections.abc import Callable

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker

from actors.report import generate_report, mark_record_failed
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_message import ReportQueueMessage
from services.domain.errors import ServiceError
from services.domain.events import Event
from services.domain.status import RecordStatus
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import BrokerFactory, WorkerFactory

QUEUE = EventLogKeys().queue


def logged(client: redis.Redis) -> list[Event]:
    """The events waiting in the log queue, oldest first."""
    return [Event.decode(raw) for raw in reversed(client.lrange(QUEUE, 0, -1))]


@pytest.mark.usefixtures("worker_services")
def test_outcomes_outside_a_worker(make_record: Callable[..., int], redis_client: redis.Redis) -> None:
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
        ("report.dead_lettered", broken, "worker"),
    ]
    assert events[1].data["attempt"] is None  # no current message outside a worker
    assert events[1].data["error"].startswith("ServiceError: ")
    assert events[2].data == {"retries": MAX_RETRY_COUNT, "statusSet": True}


@pytest.mark.usefixtures("worker_services")
def test_a_worker_logs_the_attempt_that_failed_and_the_dead_letter(
    make_broker: BrokerFactory,
    make_worker: WorkerFactory,
    make_record: Callable[..., int],
    redis_client: redis.Redis,
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
    assert events[("report.dead_lettered", broken)] == {"retries": MAX_RETRY_COUNT, "statusSet": True}
