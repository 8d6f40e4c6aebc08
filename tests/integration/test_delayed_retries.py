"""Delayed retries and the fault drill on the real Redis and PostgreSQL, with a real worker.

A record in the fault drill fails its real attempts (the report actor raises), so its job
waits in the broker's delayed set as the broker writes it (`<16 hex>|<job>`): listed with
its record, attempts and due time, queued again now (its next attempt fails again, one
retry further), then deleted (no further attempt, the record set to 5, its index entry
gone). Every action is audited. The drill ends by itself and on request.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import cast

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from redis_adapters.drill_store import RedisFaultDrill
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    MAX_RETRY_COUNT,
    REPORT_DELAYED_KEY,
    REPORT_JOBS_KEY,
    RETRY_DELAYS_MS,
)
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.errors import ParamError
from services.domain.opsmodel import DELETED, RETRIED, SKIPPED, DelayedRetry
from services.domain.status import RecordStatus
from services.persistence.event_store import list_record_events
from services.persistence.uow import UnitOfWork
from services.usecases import admin, drill, operations
from services.usecases.audit import DatabaseAuditLog, list_audit
from tests.support.operations import ACTOR, MakeRecord
from tests.support.record_state import status_of, wait_for_status


@pytest.fixture
def ops(redis_client: redis.Redis) -> RedisQueueOperations:
    return RedisQueueOperations(redis_client)


@pytest.fixture
def audit(session_factory: sessionmaker[Session], event_log: Engine) -> DatabaseAuditLog:
    return DatabaseAuditLog(session_factory)


@pytest.fixture
def fault_drill(redis_client: redis.Redis) -> RedisFaultDrill:
    return RedisFaultDrill(redis_client, Keyspace.of().drill)


#: Due times are whole milliseconds of Redis's clock; this host's clock is read in microseconds.
CLOCK_MS = timedelta(milliseconds=2)


def waiting_retry(ops: RedisQueueOperations, attempts: int, timeout: float = 60) -> DelayedRetry:
    """The one delayed retry, once it has made `attempts` failed attempts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, items = ops.delayed_retries(0, 10)
        if len(items) == 1 and items[0].attempts == attempts:
            return items[0]
        time.sleep(0.05)
    raise AssertionError(f"no delayed retry after {attempts} attempt(s): {ops.delayed_retries(0, 10)}")


def test_a_drilled_record_is_retried_now_then_deleted(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
    fault_drill: RedisFaultDrill,
) -> None:
    record_id = make_record(RecordStatus.GENERATING)  # answers complete: only the drill fails it
    drill.start_fault_drill(fault_drill, audit, ACTOR, [record_id], minutes=5)
    assert [d.record_id for d in drill.list_fault_drill(fault_drill)] == [record_id]
    before_failure = datetime.now(UTC)
    RedisReportQueue(redis_client).enqueue(record_id)

    first = waiting_retry(ops, attempts=1)
    seen = datetime.now(UTC)
    # The member is the broker's own: a 16-hex prefix, then the job.
    (member,) = cast(list[bytes], redis_client.zrange(REPORT_DELAYED_KEY, 0, -1))
    assert member.startswith(f"{first.message_id}|".encode())
    assert first.record_id == record_id
    assert first.raw == member[17:].decode()
    # Due 10 s after the failure, which happened between `before_failure` and `seen` (the
    # Redis clock wrote it, in ms; the same host's clock reads it): bounds no load can break.
    first_delay = timedelta(milliseconds=RETRY_DELAYS_MS[0])
    assert first.due_at is not None
    assert before_failure + first_delay - CLOCK_MS <= first.due_at <= seen + first_delay + CLOCK_MS
    page = operations.list_delayed_retries(UnitOfWork(session_factory), ops)
    assert (page.total, [i.message_id for i in page.items]) == (1, [first.message_id])

    # Retry now: the same job is queued at once, fails again (the drill holds), waits 30 s.
    assert first.message_id is not None
    before_retry = datetime.now(UTC)
    outcome = operations.retry_delayed_now(ops, audit, ACTOR, [first.message_id])
    assert [(o.id, o.outcome) for o in outcome] == [(first.message_id, RETRIED)]
    second = waiting_retry(ops, attempts=2)
    assert second.message_id != first.message_id
    assert second.enqueued_at == first.enqueued_at  # a retry keeps its first EnqueueTime
    # Its second failure came after the retry now: due 30 s after that.
    assert second.due_at is not None
    assert second.due_at >= before_retry + timedelta(milliseconds=RETRY_DELAYS_MS[1]) - CLOCK_MS
    # The first one is gone: named again, it is skipped, nothing is pushed.
    again = operations.retry_delayed_now(ops, audit, ACTOR, [first.message_id])
    assert [(o.outcome, o.code) for o in again] == [(SKIPPED, 3241)]

    # Delete: no further attempt, the record shows the failure, the index forgets the job.
    assert second.message_id is not None
    deleted = operations.delete_delayed_retries(
        UnitOfWork(session_factory), ops, audit, ACTOR, [second.message_id]
    )
    assert [(o.id, o.outcome) for o in deleted] == [(second.message_id, DELETED)]
    assert redis_client.zcard(REPORT_DELAYED_KEY) == 0
    assert status_of(session_factory, record_id) == RecordStatus.FAILED
    assert redis_client.hget(REPORT_JOBS_KEY, str(record_id)) is None
    # The record's timeline says so: its event committed with status 5.
    timeline = list_record_events(UnitOfWork(session_factory), record_id, page_size=100).items
    assert [(e.event_type, e.actor, e.data) for e in timeline if e.event_type == "report.retry_deleted"] == [
        ("report.retry_deleted", ACTOR.name, {"messageIds": [second.message_id], "statusSet": True})
    ]

    actions = [e.action for e in list_audit(UnitOfWork(session_factory)).items]
    assert actions == ["delete_delayed", "retry_now", "retry_now", "drill_start"]
    entries = list_audit(UnitOfWork(session_factory), action="delete_delayed").items
    assert entries[0].detail == f"1 deleted, 0 skipped; records set to status 5: {record_id}"

    # The drill stopped, a regeneration completes.
    assert drill.stop_fault_drill(fault_drill, audit, ACTOR, None) == [record_id]
    assert not fault_drill.fails(record_id)
    admin.regenerate_report(
        UnitOfWork(session_factory), RedisReportQueue(redis_client), record_id, actor=ACTOR, audit=audit
    )
    wait_for_status(session_factory, record_id, RecordStatus.COMPLETED)


def test_a_drill_ends_by_itself(
    redis_client: redis.Redis, audit: DatabaseAuditLog, fault_drill: RedisFaultDrill
) -> None:
    past = datetime.now(UTC) - timedelta(minutes=2)
    drill.start_fault_drill(fault_drill, audit, ACTOR, [7], minutes=1, now=past)  # ended a minute ago
    drill.start_fault_drill(fault_drill, audit, ACTOR, [8], minutes=5)
    assert not fault_drill.fails(7)
    assert fault_drill.fails(8)
    # A group's records in one call: only those whose drill still runs.
    assert fault_drill.held([7, 8, 9]) == {8}
    assert fault_drill.held([]) == set()
    assert [d.record_id for d in drill.list_fault_drill(fault_drill)] == [8]
    # The hash expires with its last entry: nothing is left behind.
    assert 0 < redis_client.pttl(Keyspace.of().drill) <= 5 * 60_000


def test_the_drill_refuses_what_it_cannot_do(audit: DatabaseAuditLog, fault_drill: RedisFaultDrill) -> None:
    for ids, minutes in (([], 5), ([0], 5), ([1], 0), ([1], drill.MAX_DRILL_MINUTES + 1)):
        with pytest.raises(ParamError):
            drill.start_fault_drill(fault_drill, audit, ACTOR, ids, minutes=minutes)
    assert drill.list_fault_drill(fault_drill) == []


def test_the_drill_fails_only_attempts_that_would_generate(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
    fault_drill: RedisFaultDrill,
) -> None:
    """A job for a drilled record that is no longer in status 3 (its report made, or failed
    already) would be skipped: the drill must not fail it (found by the soak, bench/soak.py:
    a second job of a record in the drill kept failing after the record was settled, and was
    retried and dead-lettered for nothing)."""
    done = make_record(RecordStatus.COMPLETED)
    failed = make_record(RecordStatus.FAILED)
    drill.start_fault_drill(fault_drill, audit, ACTOR, [done, failed], minutes=5)
    queue = RedisReportQueue(redis_client)
    for record_id in (done, failed):
        queue.enqueue(record_id)
    deadline = time.monotonic() + 30
    while redis_client.hlen(REPORT_JOBS_KEY) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Acknowledged and skipped: no job left, no retry waiting, the records unchanged.
    assert redis_client.hlen(REPORT_JOBS_KEY) == 0
    assert ops.delayed_retries(0, 10)[0] == 0
    assert (status_of(session_factory, done), status_of(session_factory, failed)) == (
        RecordStatus.COMPLETED,
        RecordStatus.FAILED,
    )


def test_the_last_job_of_a_record_decides_its_failure(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
    fault_drill: RedisFaultDrill,
) -> None:
    """Two jobs of one record (an admin regenerated it while its old job was retrying): the
    old job's last attempt fails while the new one still has attempts left. The dead letter
    must not set status 5 (found by the soak: the record ended in 5 and the new job was then
    skipped, so the regeneration never got its attempts); the new job decides."""
    record_id = make_record(RecordStatus.GENERATING)
    drill.start_fault_drill(fault_drill, audit, ACTOR, [record_id], minutes=5)
    old = ReportQueueMessage(record_id, MAX_RETRY_COUNT, "2025-01-15T10:30:00")
    RedisReportQueue(redis_client).index.enqueue([old.encode(), ReportQueueMessage.new(record_id).encode()])

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 1 and redis_client.zcard(REPORT_DELAYED_KEY) == 1
    ):
        time.sleep(0.05)
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 1  # the old job, at its last attempt
    retry = waiting_retry(ops, attempts=1)  # the new one, after its first
    assert status_of(session_factory, record_id) == RecordStatus.GENERATING
    assert redis_client.hget(REPORT_JOBS_KEY, str(record_id)) == b"1"

    # The drill over, the new job's next attempt generates the report.
    drill.stop_fault_drill(fault_drill, audit, ACTOR, None)
    assert retry.message_id is not None
    operations.retry_delayed_now(ops, audit, ACTOR, [retry.message_id])
    wait_for_status(session_factory, record_id, RecordStatus.COMPLETED)
