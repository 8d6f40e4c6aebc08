"""The operations tooling (services/usecases/operations.py) on the real Redis and PostgreSQL.

Dead letters carry their error, attempts and time; requeue resets the record and swaps
the entry for a fresh job atomically, and the job runs to status 4 on a real worker; a
dead letter moved back by hand is refused and kept; quarantined payloads are shown
verbatim and deleted; every action is audited in PostgreSQL, and refused without it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from redis_adapters.queue_figures import queue_figures
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    INVALID_QUEUE_KEY,
    REPORT_JOBS_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
)
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.errors import DatabaseUnavailable
from services.domain.events import EventType
from services.domain.opsmodel import REGENERATED, REQUEUED, SKIPPED
from services.domain.status import RecordStatus
from services.persistence.db import make_engine, make_session_factory
from services.persistence.models import EventLogEntry
from services.persistence.uow import UnitOfWork
from services.usecases import admin, operations
from services.usecases.audit import DatabaseAuditLog
from tests.support.operations import (
    ACTOR,
    MakeRecord,
    add_answers,
    bare_dead_letter,
    dead_letter,
    dead_letter_by_worker,
)
from tests.support.record_state import status_of, wait_for_status
from tests.support.urls import CLOSED_DATABASE_URL


@pytest.fixture
def ops(redis_client: redis.Redis) -> RedisQueueOperations:
    return RedisQueueOperations(redis_client)


@pytest.fixture
def audit(session_factory: sessionmaker[Session], event_log: Engine) -> DatabaseAuditLog:
    return DatabaseAuditLog(session_factory)


def test_dead_letter_carries_error_attempts_and_time(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    ops: RedisQueueOperations,
) -> None:
    record_id = make_record(RecordStatus.GENERATING, answers={})
    before = datetime.now(UTC)
    raw = dead_letter_by_worker(report_broker, redis_client, record_id)
    entry = json.loads(raw)
    # The .NET fields first and unchanged, then ours.
    assert list(entry)[:3] == ["RecordId", "RetryCount", "EnqueueTime"]
    assert [entry["RecordId"], entry["RetryCount"]] == [record_id, 3]
    assert entry["EnqueueTime"] == "2025-01-15T10:30:00"
    assert entry["Attempts"] == 4
    assert entry["LastError"].startswith("ServiceError: ")
    assert ReportQueueMessage.decode(raw).record_id == record_id
    [letter] = operations.list_dead_letters(ops).items
    assert (letter.record_id, letter.attempts, letter.raw) == (record_id, 4, raw.decode())
    assert letter.last_error == entry["LastError"]
    assert letter.dead_at is not None
    assert before - timedelta(seconds=1) <= letter.dead_at <= datetime.now(UTC)
    assert status_of(session_factory, record_id) == RecordStatus.FAILED


def test_requeued_dead_letter_runs_to_completion(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    uow: UnitOfWork,
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
) -> None:
    record_id = make_record(RecordStatus.GENERATING, answers={})
    dead_letter_by_worker(report_broker, redis_client, record_id)
    [letter] = operations.list_dead_letters(ops).items
    add_answers(session_factory, record_id)  # the cause of the failure is fixed

    [outcome] = operations.requeue_dead_letters(uow, ops, audit, ACTOR, [letter.message_id])

    assert outcome == operations.ItemOutcome(id=letter.message_id, outcome=REQUEUED)
    wait_for_status(session_factory, record_id, RecordStatus.COMPLETED)
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    figures = queue_figures(redis_client)
    assert (figures.dead, figures.queued, figures.in_flight) == (0, 0, 0)
    assert redis_client.hgetall(REPORT_JOBS_KEY) == {}
    [entry] = operations.list_audit(uow).items
    assert (entry.action, entry.actor, entry.credential) == ("requeue", ACTOR.name, ACTOR.credential)
    assert (entry.ids, entry.outcome) == ([letter.message_id], "ok")


def test_requeue_swaps_the_entry_for_a_fresh_job_in_one_step(
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    uow: UnitOfWork,
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
) -> None:
    """No worker: the queue holds the fresh job (RetryCount 0), the index counts it (the
    reconciler's `dead` mark replaced), the record is back in 3 with no results."""
    record_id = make_record(RecordStatus.FAILED)
    dead = dead_letter(record_id)
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead)
    redis_client.hset(REPORT_JOBS_KEY, str(record_id), "dead")

    outcomes = operations.requeue_dead_letters(uow, ops, audit, ACTOR, None)

    assert [o.outcome for o in outcomes] == [REQUEUED]
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0
    [job] = redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)
    fresh = ReportQueueMessage.decode(job)
    assert (fresh.record_id, fresh.retry_count, fresh.dead) == (record_id, 0, None)
    assert redis_client.hget(REPORT_JOBS_KEY, str(record_id)) == b"1"
    assert status_of(session_factory, record_id) == RecordStatus.GENERATING
    [entry] = operations.list_audit(uow, action="requeue").items
    assert entry.detail is not None
    assert entry.detail.startswith("all; ")
    # The record went from 5 back to 3: its timeline says so, committed with the reset.
    with session_factory() as s:
        logged = s.execute(
            select(EventLogEntry.actor, EventLogEntry.data).where(
                EventLogEntry.record_id == record_id,
                EventLogEntry.event_type == EventType.REPORT_REGENERATED.value,
            )
        ).all()
    assert [tuple(row) for row in logged] == [(ACTOR.name, {"batch": True, "deadLetter": True})]


def test_requeue_skips_with_a_code_and_reason_per_entry(
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    uow: UnitOfWork,
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
) -> None:
    completed = make_record(RecordStatus.COMPLETED)
    deleted = make_record(RecordStatus.FAILED, deleted=True)
    failed = make_record(RecordStatus.FAILED)
    for record_id in (completed, deleted, 999_999, failed):
        redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(record_id))
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, b'{"RecordId":"x"}')
    letters = operations.list_dead_letters(ops).items
    handles = [letter.message_id for letter in letters]

    outcomes = operations.requeue_dead_letters(uow, ops, audit, ACTOR, [*handles, "0123456789abcdef"])

    by_record = {letter.record_id: o for letter, o in zip(letters, outcomes, strict=False)}
    assert by_record[failed].outcome == REQUEUED
    assert (by_record[completed].outcome, by_record[completed].code) == (SKIPPED, 2005)
    assert (by_record[deleted].code, by_record[999_999].code) == (3241, 3241)
    assert by_record[None].code == 1001
    assert (outcomes[-1].id, outcomes[-1].code) == ("0123456789abcdef", 3241)
    # Only the failed record's letter left the list; the others stay for a decision.
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 4
    assert status_of(session_factory, completed) == RecordStatus.COMPLETED
    [entry] = operations.list_audit(uow).items
    assert entry.outcome == "partial"


def test_delete_dead_letters(
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    uow: UnitOfWork,
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
) -> None:
    record_id = make_record(RecordStatus.FAILED)
    same = dead_letter(record_id)
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, same, same, b"other")
    other, first, second = (letter.message_id for letter in operations.list_dead_letters(ops).items)
    assert second == first + ".2"  # repeats of the same bytes get their own handles

    outcomes = operations.delete_dead_letters(ops, audit, ACTOR, [other, first, "feedfacefeedface"])

    assert [o.outcome for o in outcomes] == ["deleted", "deleted", SKIPPED]
    assert redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1) == [same]
    assert status_of(session_factory, record_id) == RecordStatus.FAILED
    [entry] = operations.list_audit(uow, action="delete_dead").items
    assert entry.ids == [other, first, "feedfacefeedface"]


def test_regenerate_drops_the_records_dead_letters(
    make_record: MakeRecord,
    redis_client: redis.Redis,
    uow: UnitOfWork,
    ops: RedisQueueOperations,
    audit: DatabaseAuditLog,
) -> None:
    one, two, kept = (make_record(RecordStatus.FAILED) for _ in range(3))
    for record_id in (one, two, kept):
        redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(record_id))
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, bare_dead_letter(two))  # its record's too, whatever its form
    queue = RedisReportQueue(redis_client)

    admin.regenerate_report(uow, queue, one, actor=ACTOR, audit=audit, dead_letters=ops)
    assert queue_figures(redis_client).dead == 3
    outcome = admin.batch_regenerate(uow, queue, [two, 999_999], actor=ACTOR, audit=audit, dead_letters=ops)

    assert [letter.record_id for letter in operations.list_dead_letters(ops).items] == [kept]
    assert queue_figures(redis_client).queued == 2
    items = [(i.id, i.outcome, i.code) for i in outcome.items]
    assert items == [(two, REGENERATED, None), (999_999, SKIPPED, 3241)]
    actions = [e.action for e in operations.list_audit(uow).items]
    assert actions == ["batch_regenerate", "regenerate"]


def test_batch_regenerate_gives_each_id_its_outcome(
    make_record: MakeRecord, uow: UnitOfWork, redis_client: redis.Redis
) -> None:
    failed, generating, completed = (
        make_record(RecordStatus.FAILED),
        make_record(RecordStatus.GENERATING),
        make_record(RecordStatus.COMPLETED),
    )
    deleted = make_record(RecordStatus.FAILED, deleted=True)
    ids = [failed, completed, 999_999, generating, failed, deleted, 2**63]

    result = admin.batch_regenerate(uow, RedisReportQueue(redis_client), ids).result

    assert (result.success_count, result.skipped_count) == (2, 5)
    assert [(i.id, i.outcome, i.code) for i in result.items] == [
        (failed, REGENERATED, None),
        (completed, SKIPPED, 2005),
        (999_999, SKIPPED, 3241),
        (generating, REGENERATED, None),
        (failed, SKIPPED, 1001),
        (deleted, SKIPPED, 3241),
        (2**63, SKIPPED, 3241),
    ]
    assert result.items[1].reason is not None
    assert "已完成" in result.items[1].reason


def test_batch_regenerate_with_the_queue_down_skips_with_5003(
    make_record: MakeRecord, uow: UnitOfWork, failing_queue: object
) -> None:
    record_id = make_record(RecordStatus.FAILED)
    result = admin.batch_regenerate(uow, failing_queue, [record_id]).result  # type: ignore[arg-type]
    assert [(i.outcome, i.code) for i in result.items] == [(SKIPPED, 5003)]


def test_hand_moved_dead_letter_is_refused_and_kept(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`LMOVE report:queue:dead report:queue RIGHT LEFT` by hand used to be skipped by the actor
    (the record is in status 5) and acknowledged: the entry was gone without a word."""
    record_id = make_record(RecordStatus.GENERATING, answers={})
    raw = dead_letter_by_worker(report_broker, redis_client, record_id)
    other = make_record(RecordStatus.GENERATING)
    RedisReportQueue(redis_client).enqueue(other)  # a live job of another record, counted in the index

    redis_client.lmove(DEAD_LETTER_QUEUE_KEY, REPORT_QUEUE_KEY, "RIGHT", "LEFT")
    report_broker.join(REPORT_QUEUE_NAME, timeout=10_000)

    assert redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1) == [raw]
    assert "moved back to the queue by hand" in caplog.text
    assert status_of(session_factory, record_id) == RecordStatus.FAILED
    wait_for_status(session_factory, other, RecordStatus.COMPLETED)
    assert redis_client.hgetall(REPORT_JOBS_KEY) == {}


def test_invalid_payloads_are_shown_verbatim_deleted_and_purged(
    redis_client: redis.Redis, uow: UnitOfWork, ops: RedisQueueOperations, audit: DatabaseAuditLog
) -> None:
    payloads = [b"{not json", b"\xff\xfe binary", "中文".encode(), b"{not json"]
    redis_client.lpush(INVALID_QUEUE_KEY, *payloads)
    page = operations.list_invalid(ops, offset=1, limit=2)
    assert (page.total, page.offset, page.limit) == (4, 1, 2)
    assert [p.raw for p in page.items] == ["中文", "\\xff\\xfe binary"]

    key = page.items[1].key
    assert [o.outcome for o in operations.delete_invalid(ops, audit, ACTOR, [key])] == ["deleted"]
    assert [o.outcome for o in operations.delete_invalid(ops, audit, ACTOR, [key])] == [SKIPPED]
    assert b"\xff\xfe binary" not in redis_client.lrange(INVALID_QUEUE_KEY, 0, -1)
    assert operations.purge_invalid(ops, audit, ACTOR) == 3
    assert redis_client.llen(INVALID_QUEUE_KEY) == 0
    actions = [(e.action, e.outcome) for e in operations.list_audit(uow).items]
    assert actions == [("purge_invalid", "ok"), ("delete_invalid", "failed"), ("delete_invalid", "ok")]


def test_audit_listing_filters_and_pages(
    make_record: MakeRecord, uow: UnitOfWork, ops: RedisQueueOperations, audit: DatabaseAuditLog
) -> None:
    other = operations.AdminActor(name="cli", credential="cli")
    operations.purge_invalid(ops, audit, ACTOR)
    middle = datetime.now(UTC)
    operations.purge_invalid(ops, audit, other)
    operations.delete_invalid(ops, audit, other, ["00"])

    assert operations.list_audit(uow).total == 3
    by_cli = operations.list_audit(uow, actor="cli").items
    assert [e.action for e in by_cli] == ["delete_invalid", "purge_invalid"]
    assert operations.list_audit(uow, action="purge_invalid").total == 2
    assert [e.actor for e in operations.list_audit(uow, since=middle).items] == ["cli", "cli"]
    assert [e.actor for e in operations.list_audit(uow, until=middle).items] == [ACTOR.name]
    page = operations.list_audit(uow, offset=1, limit=1)
    assert (page.total, len(page.items), page.items[0].action) == (3, 1, "purge_invalid")


def test_no_action_without_its_audit(
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    uow: UnitOfWork,
    ops: RedisQueueOperations,
) -> None:
    """The database down: the action is refused before it touches Redis or the record."""
    down = DatabaseAuditLog(make_session_factory(make_engine(CLOSED_DATABASE_URL)))
    record_id = make_record(RecordStatus.FAILED)
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(record_id))
    redis_client.lpush(INVALID_QUEUE_KEY, b"junk")
    with pytest.raises(DatabaseUnavailable):
        operations.requeue_dead_letters(uow, ops, down, ACTOR, None)
    with pytest.raises(DatabaseUnavailable):
        operations.purge_invalid(ops, down, ACTOR)
    with pytest.raises(DatabaseUnavailable):
        admin.regenerate_report(uow, RedisReportQueue(redis_client), record_id, actor=ACTOR, audit=down)
    assert (redis_client.llen(DEAD_LETTER_QUEUE_KEY), redis_client.llen(INVALID_QUEUE_KEY)) == (1, 1)
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
    assert status_of(session_factory, record_id) == RecordStatus.FAILED


def test_requeue_all_of_nothing_is_an_audited_no_op(
    uow: UnitOfWork, ops: RedisQueueOperations, audit: DatabaseAuditLog, redis_client: redis.Redis
) -> None:
    assert operations.requeue_dead_letters(uow, ops, audit, ACTOR, None) == []
    [entry] = operations.list_audit(uow).items
    assert (entry.action, entry.ids, entry.outcome) == ("requeue", [], "ok")
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
