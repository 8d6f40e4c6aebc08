"""Scaffolding of the operations tests: a report worker on the test Redis, dead letters made
by the real retry path, answers added to a record after the fact, audit rows read back."""

from __future__ import annotations

from collections.abc import Callable

import redis
from listbroker import RedisListBroker
from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from redis_adapters.queues import DEAD_LETTER_QUEUE_KEY, MAX_RETRY_COUNT, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_message import ReportQueueMessage
from services.domain.opsmodel import AdminActor
from services.persistence.models import Answer, Question
from tests.conftest import default_answer
from tests.support.redis_keys import as_bytes

MakeRecord = Callable[..., int]
ACTOR = AdminActor(name="admin:test", credential="admin-token …test")


def dead_letter_by_worker(broker: RedisListBroker, redis_client: redis.Redis, record_id: int) -> bytes:
    """Run the record's last attempt (RetryCount 3) through the worker: it fails and is
    dead-lettered (the record has no answers). The dead entry."""
    last = ReportQueueMessage(record_id, MAX_RETRY_COUNT, "2025-01-15T10:30:00")
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
