"""The events of a status change commit with it (services/usecases/change_events.py), against the
real PostgreSQL: stored when the change commits, whatever happens to the process next, never
when it does not, and stamped with the change's time.

Found by the 60-minute soak of round four (docs/reliability.md): a regeneration task's worker killed
between a page's commit and its events left four records regenerated with no
`report.regenerated`, and a submission whose web was slow to reach a hung Redis logged
`answers.submitted` ten seconds after its commit, after its job's first attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import InvalidOperation, QueueUnavailable, RecordNotFound
from services.domain.events import Event, EventType, MisroutedEvent, emit
from services.domain.opsmodel import AdminActor
from services.domain.questionnaire import load_questionnaire
from services.persistence.models import AssessmentRecord, EventLogEntry
from services.persistence.uow import UnitOfWork
from services.usecases import admin, assessment, reconcile, reports
from services.usecases.change_events import log_change
from tests.support.fakes import FailingQueue, RecordingQueue
from tests.support.records import default_answer

#: A whole submission: every active question answered.
ANSWERS = [(q.id, default_answer(q.id)) for q in load_questionnaire().questions]
ADMIN = AdminActor(name="admin:0123456789ab", credential="admin-token 0123456789ab")


class ProcessKilled(BaseException):
    """Stands for the process dying right after the commit: nothing after it runs (not even
    `except Exception` handlers), as with a SIGKILL."""


class DyingQueue:
    """A report queue whose process dies as the job is handed to it."""

    def enqueue(self, record_id: int) -> None:
        raise ProcessKilled

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        raise ProcessKilled


def stored(session_factory: sessionmaker[Session], event_type: EventType) -> list[EventLogEntry]:
    with session_factory() as s:
        return list(
            s.scalars(
                select(EventLogEntry)
                .where(EventLogEntry.event_type == event_type.value)
                .order_by(EventLogEntry.record_id)
            ).all()
        )


def record_row(session_factory: sessionmaker[Session], record_id: int) -> AssessmentRecord:
    with session_factory() as s:
        record = s.get(AssessmentRecord, record_id)
        assert record is not None
        return record


# -- a record's creation, start and deletion ------------------------------------------------


def test_a_creation_and_a_start_write_their_events_in_their_own_statements(
    uow: UnitOfWork, session_factory: sessionmaker[Session]
) -> None:
    record = assessment.create_record(uow, 42)
    started = assessment.start_record(uow, 42, record.id)
    again = assessment.start_record(uow, 42, record.id)  # already in 2: answered, logged again
    assert started.started_at == again.started_at
    [created] = stored(session_factory, EventType.RECORD_CREATED)
    starts = stored(session_factory, EventType.RECORD_STARTED)
    assert (created.record_id, created.user_id, created.actor, created.data) == (record.id, 42, "user:42", {})
    assert created.occurred_at == record.created_at
    assert [(e.record_id, e.user_id, e.actor, e.data) for e in starts] == [(record.id, 42, "user:42", {})] * 2
    assert started.started_at in {e.occurred_at for e in starts}  # the start's own time


def test_a_refused_start_stores_no_event(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    submitted, others = make_record(3, user_id=42), make_record(1, user_id=7)
    with pytest.raises(InvalidOperation):
        assessment.start_record(uow, 42, submitted)
    with pytest.raises(RecordNotFound):
        assessment.start_record(uow, 42, others)
    assert stored(session_factory, EventType.RECORD_STARTED) == []
    assert record_row(session_factory, others).status == 1


def test_a_deletion_commits_its_event(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(4, user_id=42)
    admin.soft_delete_record(uow, record_id, actor=ADMIN)
    with pytest.raises(RecordNotFound):  # deleted already: no second event
        admin.soft_delete_record(uow, record_id, actor=ADMIN)
    [event] = stored(session_factory, EventType.RECORD_DELETED)
    assert (event.record_id, event.actor, event.data) == (record_id, ADMIN.name, {})
    assert record_row(session_factory, record_id).is_deleted


def test_an_event_is_refused_a_way_its_type_does_not_take(uow: UnitOfWork) -> None:
    """The route of each type is `ROUTES`'s (services/domain/events.py): a change's event cannot be
    emitted through the queue, nor a queued one written with a change."""
    with pytest.raises(MisroutedEvent):
        emit(None, Event.new(EventType.RECORD_STARTED, record_id=1))
    with uow, pytest.raises(MisroutedEvent):
        log_change(uow, EventType.ANSWERS_SAVED, [1], at=datetime.now(UTC), actor="user:1")


# -- the submission ------------------------------------------------------------------------


def test_a_submission_has_its_event_even_when_its_process_dies_after_the_commit(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    with pytest.raises(ProcessKilled):
        assessment.submit_answers(uow, DyingQueue(), 42, record_id, ANSWERS)
    record = record_row(session_factory, record_id)
    assert record.status == 3
    [event] = stored(session_factory, EventType.ANSWERS_SUBMITTED)
    assert (event.record_id, event.user_id, event.actor) == (record_id, 42, "user:42")
    # Its time is the submission's own, not when a process got round to logging it.
    assert event.occurred_at == record.submitted_at
    assert event.data == {}


def test_a_submission_whose_job_is_refused_is_marked_not_enqueued(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(1, user_id=42)
    result = assessment.submit_answers(uow, FailingQueue(), 42, record_id, ANSWERS)
    assert result.enqueued is False
    [event] = stored(session_factory, EventType.ANSWERS_SUBMITTED)
    assert (event.record_id, event.data) == (record_id, {"enqueued": False})


def test_a_refused_submission_stores_no_event(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(4, user_id=42)
    with pytest.raises(InvalidOperation):
        assessment.submit_answers(uow, RecordingQueue(), 42, record_id, ANSWERS)
    assert stored(session_factory, EventType.ANSWERS_SUBMITTED) == []


# -- regenerations -------------------------------------------------------------------------


def regenerate_one(uow: UnitOfWork, queue: Any, ids: list[int]) -> None:
    admin.regenerate_report(uow, queue, ids[0], actor=ADMIN)


def regenerate_batch(uow: UnitOfWork, queue: Any, ids: list[int]) -> None:
    admin.batch_regenerate(uow, queue, ids, actor=ADMIN)


@pytest.mark.parametrize("regenerate", [regenerate_one, regenerate_batch], ids=["single", "batch"])
def test_a_regeneration_has_its_events_even_when_its_process_dies_after_the_commit(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    regenerate: Callable[[UnitOfWork, Any, list[int]], None],
) -> None:
    ids = [make_record(5), make_record(5)] if regenerate is regenerate_batch else [make_record(5)]
    with session_factory() as s:  # the database's clock, which stamps the reset
        before: datetime = s.execute(text("SELECT clock_timestamp()")).scalar_one()
    with pytest.raises(ProcessKilled):
        regenerate(uow, DyingQueue(), ids)
    assert {record_row(session_factory, i).status for i in ids} == {3}
    events = stored(session_factory, EventType.REPORT_REGENERATED)
    assert [e.record_id for e in events] == ids
    assert {e.actor for e in events} == {ADMIN.name}
    assert {e.data["batch"] for e in events} == {regenerate is regenerate_batch}
    # One moment for one reset, taken by the database once the rows were locked.
    assert len({e.occurred_at for e in events}) == 1
    assert events[0].occurred_at >= before


@pytest.mark.parametrize("regenerate", [regenerate_one, regenerate_batch], ids=["single", "batch"])
def test_a_regeneration_whose_jobs_are_refused_is_marked_not_enqueued(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    regenerate: Callable[[UnitOfWork, Any, list[int]], None],
) -> None:
    ids = [make_record(5), make_record(3)]
    if regenerate is regenerate_one:
        with pytest.raises(QueueUnavailable):
            regenerate(uow, FailingQueue(), ids)
        ids = ids[:1]
    else:
        regenerate(uow, FailingQueue(), ids)
    events = stored(session_factory, EventType.REPORT_REGENERATED)
    assert [(e.record_id, e.data.get("enqueued")) for e in events] == [(i, False) for i in ids]


def test_a_batch_logs_only_the_records_it_reset(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    failed, done, deleted = make_record(5), make_record(4), make_record(5, deleted=True)
    queue = RecordingQueue()
    outcome = admin.batch_regenerate(uow, queue, [failed, done, deleted, 999_999_999], actor=ADMIN)
    assert outcome.queued == (failed,)
    events = stored(session_factory, EventType.REPORT_REGENERATED)
    assert [(e.record_id, e.data) for e in events] == [(failed, {"batch": True, "requested": 4})]
    # Nothing to amend when the queue took the jobs: the event is the commit's, as it was.
    assert queue.batches == [[failed]]


def test_a_refused_regeneration_stores_no_event(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(4)
    with pytest.raises(InvalidOperation):
        admin.regenerate_report(uow, RecordingQueue(), record_id, actor=ADMIN)
    assert stored(session_factory, EventType.REPORT_REGENERATED) == []


# -- status 5 ------------------------------------------------------------------------------


def test_a_dead_letter_that_sets_status_5_commits_its_event(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    generating, done = make_record(3), make_record(4)
    letter = {"retries": 3}
    assert reports.mark_generation_failed(uow, generating, event_data=letter, actor="worker") is True
    assert reports.mark_generation_failed(uow, done, event_data=letter, actor="worker") is False
    [event] = stored(session_factory, EventType.REPORT_DEAD_LETTERED)
    assert (event.record_id, event.actor, event.data) == (
        generating,
        "worker",
        {"retries": 3, "statusSet": True},
    )
    assert record_row(session_factory, generating).status == 5


def test_the_reconcilers_status_5_commits_its_events(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    first, second = make_record(3), make_record(3)
    owed = reconcile.records_owed(uow, grace_ms=0, after_id=0, limit=10)
    regenerated_since = admin.batch_regenerate(uow, RecordingQueue(), [second], actor=ADMIN)
    assert regenerated_since.queued == (second,)
    changed = reconcile.mark_failed_unless_changed(uow, owed, actor="reconciler")
    assert changed == [first]  # the other one changed since it was read
    events = stored(session_factory, EventType.REPORT_FAILURE_RECORDED)
    assert [(e.record_id, e.actor, e.data) for e in events] == [(first, "reconciler", {"statusSet": True})]
