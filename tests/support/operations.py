"""Scaffolding of the operations tests: a report worker on the test Redis, dead letters made
by the real retry path or planted as the broker writes them, answers added to a record after
the fact, audit rows read back."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime

import redis
from listbroker import RedisListBroker
from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from redis_adapters.queues import DEAD_LETTER_QUEUE_KEY, MAX_RETRY_COUNT, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_message import DeadMark, ReportQueueMessage
from services.domain.opsmodel import AdminActor
from services.persistence.models import Answer, Question
from tests.support.records import default_answer
from tests.support.redis_keys import as_bytes

MakeRecord = Callable[..., int]
ACTOR = AdminActor(name="admin:test", credential="admin-token …test")


#: The job's enqueue time in planted dead letters.
ENQUEUED_AT = "2025-01-15T10:30:00"


def dead_letter(record_id: int, *, error: str | None = None) -> bytes:
    """A dead letter as the broker writes it now: the job's last message (RetryCount 3) with why
    and when it died (its `dead_letter` option: the last error, the attempts made, the time)."""
    mark = DeadMark(
        dead_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        last_error=error or f"ServiceError: 测评记录 {record_id} 的答案不完整，无法生成报告",
        attempts=MAX_RETRY_COUNT + 1,
    )
    return ReportQueueMessage(record_id, MAX_RETRY_COUNT, ENQUEUED_AT, mark).encode().encode()


def bare_dead_letter(record_id: int) -> bytes:
    """A dead letter as written before they carried their error: the last message alone (still
    read, requeued and deleted like the others)."""
    return ReportQueueMessage(record_id, MAX_RETRY_COUNT, ENQUEUED_AT).encode().encode()


def delayed_retry(record_id: int, retry_count: int, due_ms: int) -> dict[bytes, float]:
    """A retry waiting out its delay, as the broker writes it in `report:queue:delayed`: the
    member `<16 hex>|<message>` (listbroker's DELAYED_PREFIX_LEN) scored by its due time in ms."""
    message = ReportQueueMessage(record_id, retry_count, ENQUEUED_AT).encode().encode()
    return {secrets.token_hex(8).encode() + b"|" + message: float(due_ms)}


def dead_letter_by_worker(broker: RedisListBroker, redis_client: redis.Redis, record_id: int) -> bytes:
    """Run the record's last attempt (RetryCount 3) through the worker: it fails and is
    dead-lettered (the record has no answers). The dead entry."""
    last = ReportQueueMessage(record_id, MAX_RETRY_COUNT, ENQUEUED_AT)
    before = redis_client.llen(DEAD_LETTER_QUEUE_KEY)
    redis_client.lpush(REPORT_QUEUE_KEY, last.encode())
    broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == before + 1
    return as_bytes(redis_client.lindex(DEAD_LETTER_QUEUE_KEY, 0))


def add_answers(session_factory: sessionmaker[Session], record_id: int) -> None:
    """Answer every active question, so that the next generation succeeds."""
    with session_factory() as session:
        ids = session.scalars(select(Question.id).where(Question.is_active)).all()
        rows = [{"record_id": record_id, "question_id": q, "value": default_answer(q)} for q in ids]
        session.execute(insert(Answer), rows)
        session.commit()
