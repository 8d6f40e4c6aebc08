"""The unit of work's statements on psycopg (services/persistence/driver.py), against the real
PostgreSQL: errors keep SQLAlchemy's classes (an unreachable database stays told apart from a
failed statement), a batch is all or nothing, and a connection a fault left unusable never goes
back to the pool.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from services.domain.saved_answers import MergedAnswers
from services.persistence import driver
from services.persistence.models import Answer, AssessmentRecord
from services.persistence.uow import UnitOfWork
from tests.support.records import default_answer


def answers_of(session_factory: sessionmaker[Session], record_id: int) -> int:
    with session_factory() as s:
        return s.scalar(select(func.count()).select_from(Answer).where(Answer.record_id == record_id)) or 0


def test_a_failed_statement_is_sqlalchemys_error_and_its_batch_writes_nothing(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    # Question 999999 does not exist: the answers' foreign key refuses the INSERT, queued
    # after the DELETE and before the UPDATE of the same round trip.
    merged = MergedAnswers({101: 3, 999_999: 2}, {}, 0, None)
    with uow, pytest.raises(sa_exc.IntegrityError) as info, uow.batch():
        uow.records.store_submission(record_id, merged)
    assert isinstance(info.value.orig, psycopg.errors.ForeignKeyViolation)
    with session_factory() as s:
        assert s.get(AssessmentRecord, record_id).status == 2  # type: ignore[union-attr]
    # The unit of work's connection went back to the pool usable: the next one works.
    merged = MergedAnswers({101: 3}, {}, 0, None)
    with uow:
        with uow.batch():
            uow.records.store_submission(record_id, merged)
        uow.commit()
    assert answers_of(session_factory, record_id) == 1


def test_a_lost_connection_is_an_unreachable_database_and_the_pool_replaces_it(
    uow: UnitOfWork, engine: Engine, make_record: Callable[..., int]
) -> None:
    record_id = make_record(1, user_id=42)
    with uow:
        pid = uow.session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        # OperationalError is what web/errors.py answers 503 (5003) for, and what the worker
        # gives back uncounted: not a bug of the statement.
        with pytest.raises(sa_exc.OperationalError):
            uow.records.own(42, record_id)
    with uow:
        record = uow.records.own(42, record_id)
    assert record is not None
    assert record.status == 1


def test_statements_inside_a_batch_join_its_round_trip(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    merged = MergedAnswers({q: default_answer(q) for q in (101, 102, 103)}, {}, 0, None)
    with uow:
        with uow.batch():
            conn = driver.connection(uow.session)
            uow.records.store_submission(record_id, merged)
            # Queued, not sent: the batch's end is the round trip.
            assert conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
            assert answers_of(session_factory, record_id) == 0
        uow.commit()
    assert answers_of(session_factory, record_id) == 3
    with session_factory() as s:
        assert s.get(AssessmentRecord, record_id).status == 3  # type: ignore[union-attr]


def test_a_committing_batch_commits_at_its_end_in_its_round_trip(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    merged = MergedAnswers({q: default_answer(q) for q in (101, 102)}, {}, 0, None)
    with uow:
        with uow.batch(commit=True):
            uow.records.store_submission(record_id, merged)
            conn = driver.connection(uow.session)
            assert answers_of(session_factory, record_id) == 0  # queued, not sent
        # Committed when the block ended, before the unit of work does anything else.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert answers_of(session_factory, record_id) == 2
    with session_factory() as s:
        assert s.get(AssessmentRecord, record_id).status == 3  # type: ignore[union-attr]


def test_a_committing_batch_that_fails_commits_nothing_and_leaves_a_usable_connection(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    with uow, pytest.raises(sa_exc.IntegrityError), uow.batch(commit=True):
        uow.records.store_submission(record_id, MergedAnswers({101: 3, 999_999: 2}, {}, 0, None))
    assert answers_of(session_factory, record_id) == 0
    with session_factory() as s:
        assert s.get(AssessmentRecord, record_id).status == 2  # type: ignore[union-attr]
    with uow, uow.batch(commit=True):
        uow.records.store_submission(record_id, MergedAnswers({101: 3}, {}, 0, None))
    assert answers_of(session_factory, record_id) == 1


def test_an_autocommit_block_commits_each_statement_as_it_runs_and_ends_in_transactions(
    uow: UnitOfWork, session_factory: sessionmaker[Session]
) -> None:
    with uow:
        with uow.autocommit():
            record = uow.records.add(42)
            conn = driver.connection(uow.session)
            # Committed already, inside the unit of work: visible to another session.
            with session_factory() as s:
                assert s.get(AssessmentRecord, record.id) is not None
        assert not conn.autocommit  # back in transactions before the pool sees it again
        assert uow.records.own(42, record.id) is not None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_an_autocommit_block_inside_a_transaction_is_refused(
    uow: UnitOfWork, make_record: Callable[..., int]
) -> None:
    record_id = make_record(1, user_id=42)
    with uow:
        assert uow.records.own(42, record_id) is not None  # a transaction is open
        with pytest.raises(RuntimeError, match="inside a transaction"), uow.autocommit():
            pass


def test_a_failed_statement_in_an_autocommit_block_is_sqlalchemys_error_and_leaves_a_usable_connection(
    uow: UnitOfWork,
) -> None:
    with (
        uow,
        pytest.raises(sa_exc.ProgrammingError),
        uow.autocommit(),
        driver.statements(uow.session, pipeline=False) as conn,
    ):
        conn.execute("SELECT * FROM no_such_table")
    with uow:
        assert uow.records.add(42).status == 1


def test_a_session_statement_inside_a_batch_is_refused_before_anything_is_sent(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    merged = MergedAnswers({101: 3}, {}, 0, None)

    def submit_and_query_in_one_batch() -> None:
        with uow.batch(commit=True):
            uow.records.store_submission(record_id, merged)
            uow.session.execute(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id))

    with uow, pytest.raises(driver.StatementInPipeline, match=r"uow\.batch\(\)"):
        submit_and_query_in_one_batch()
    assert answers_of(session_factory, record_id) == 0  # the batch wrote nothing
    # The connection went back to the pool usable: the session's statement runs outside a batch.
    with uow:
        status = uow.session.scalar(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id))
        with uow.batch(commit=True):
            uow.records.store_submission(record_id, merged)
    assert (status, answers_of(session_factory, record_id)) == (2, 1)


def test_a_session_flush_inside_a_batch_is_refused(
    uow: UnitOfWork, session_factory: sessionmaker[Session]
) -> None:

    def add_in_a_batch() -> None:
        with uow.batch():
            uow.session.add(AssessmentRecord(user_id=4242, status=1))
            uow.session.flush()

    with uow, pytest.raises(driver.StatementInPipeline):
        add_in_a_batch()
    with session_factory() as s:
        assert s.scalar(select(func.count()).where(AssessmentRecord.user_id == 4242)) == 0
