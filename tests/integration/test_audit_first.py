"""An admin action never runs without its audit entry (docs/security.md), on the real
PostgreSQL: the entry is in the table, "started", at the moment the action acts; an actor the
audit cannot hold is refused before anything is done; an outcome that cannot be recorded
leaves the entry "started", never no entry at all."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import DatabaseUnavailable, ParamError
from services.domain.opsmodel import AdminActor, AuditEntry, AuditHandle
from services.domain.status import RecordStatus
from services.persistence.uow import UnitOfWork
from services.usecases import admin
from services.usecases.audit import STARTED, DatabaseAuditLog
from tests.support.records import RecordSpec
from tests.support.web_app import Records

ACTOR = AdminActor(name="console:审计", credential="admin-token 0123456789ab")


def audit_rows(engine: Engine, action: str) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT actor, data->>'outcome' FROM event_log WHERE event_type = :t ORDER BY occurred_at"),
            {"t": f"admin.{action}"},
        ).all()
    return [(str(actor), str(outcome)) for actor, outcome in rows]


class WatchingQueue:
    """A report queue that, when the action queues its job, reads what the audit table holds."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seen: list[list[tuple[str, str]]] = []

    def enqueue(self, record_id: int) -> None:
        self.seen.append(audit_rows(self.engine, "regenerate"))

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        self.seen.append(audit_rows(self.engine, "batch_regenerate"))


def test_the_entry_is_stored_before_the_action_acts(
    records: Records, event_log: Engine, session_factory: sessionmaker[Session]
) -> None:
    (record_id,) = records.insert(RecordSpec(status=RecordStatus.FAILED))
    queue = WatchingQueue(event_log)
    audit = DatabaseAuditLog(session_factory)
    admin.regenerate_report(UnitOfWork(session_factory), queue, record_id, actor=ACTOR, audit=audit)
    assert queue.seen == [[(ACTOR.name, STARTED)]]  # in the table while the job was queued
    assert audit_rows(event_log, "regenerate") == [(ACTOR.name, "ok")]  # then completed
    admin.batch_regenerate(UnitOfWork(session_factory), queue, [record_id], actor=ACTOR, audit=audit)
    assert queue.seen[-1] == [(ACTOR.name, STARTED)]
    assert audit_rows(event_log, "batch_regenerate") == [(ACTOR.name, "ok")]


@pytest.mark.parametrize("name", ["console:nul\x00", "console:\u202eevil", "console:\x1b[2J", "x" * 65])
def test_an_actor_the_audit_cannot_hold_is_refused_before_anything_is_done(
    records: Records, event_log: Engine, session_factory: sessionmaker[Session], name: str
) -> None:
    (record_id,) = records.insert(RecordSpec(status=RecordStatus.FAILED))
    queue = WatchingQueue(event_log)
    actor = AdminActor(name=name, credential="admin-token 0123456789ab")
    with pytest.raises(ParamError):
        admin.regenerate_report(
            UnitOfWork(session_factory),
            queue,
            record_id,
            actor=actor,
            audit=DatabaseAuditLog(session_factory),
        )
    assert records.status(record_id) == RecordStatus.FAILED  # untouched
    assert queue.seen == []
    assert audit_rows(event_log, "regenerate") == []


class OutcomeLost(DatabaseAuditLog):
    """The database goes away between the entry and its outcome."""

    def finish(self, handle: AuditHandle, entry: AuditEntry) -> None:
        raise DatabaseUnavailable("audit entry of regenerate not completed: the database went away")


def test_an_outcome_that_cannot_be_recorded_leaves_the_entry_started(
    records: Records, event_log: Engine, session_factory: sessionmaker[Session]
) -> None:
    (record_id,) = records.insert(RecordSpec(status=RecordStatus.FAILED))
    queue = WatchingQueue(event_log)
    admin.regenerate_report(
        UnitOfWork(session_factory), queue, record_id, actor=ACTOR, audit=OutcomeLost(session_factory)
    )
    assert records.status(record_id) == RecordStatus.GENERATING  # the action was done
    assert audit_rows(event_log, "regenerate") == [(ACTOR.name, STARTED)]
