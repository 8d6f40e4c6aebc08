"""The unit of work on a real PostgreSQL: "the database cannot be had" is DatabaseUnavailable; its
plain statements and its ORM session (made only when asked for) share one transaction."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from services.domain.errors import DatabaseUnavailable
from services.persistence import driver
from services.persistence.db import make_engine, make_session_factory
from services.persistence.uow import UnitOfWork
from tests.support.urls import CLOSED_DATABASE_URL


def test_a_pool_with_every_connection_busy_is_unavailable_not_a_failure(settings: Settings) -> None:
    """More worker threads than connections: a job that waited out the pool did nothing, so it
    must spend no attempt (DatabaseUnavailable: the gate holds it), not fail as its own error."""
    engine = make_engine(settings.database_url, pool_size=1, max_overflow=0, pool_timeout_s=0.2)
    factory = make_session_factory(engine)
    try:
        with UnitOfWork(factory) as busy:
            assert busy.session.connection().exec_driver_sql("SELECT 1").scalar() == 1
            with pytest.raises(DatabaseUnavailable, match="unreachable"), UnitOfWork(factory):
                pass
        with UnitOfWork(factory) as again:  # the connection back in the pool: it works
            assert again.session.connection().exec_driver_sql("SELECT 2").scalar() == 2
    finally:
        engine.dispose()


def test_a_database_that_refuses_connections_is_unavailable() -> None:
    engine = make_engine(CLOSED_DATABASE_URL, connect_timeout_s=1)
    try:
        with pytest.raises(DatabaseUnavailable), UnitOfWork(make_session_factory(engine)):
            pass
    finally:
        engine.dispose()


def test_leaving_without_commit_rolls_back_and_hands_the_connection_back(settings: Settings) -> None:
    engine = make_engine(settings.database_url, pool_size=1, max_overflow=0, pool_timeout_s=0.2)
    factory = make_session_factory(engine)
    try:
        with UnitOfWork(factory) as uow:
            record_id = uow.records.add(42).id
        with UnitOfWork(factory) as again:  # the one connection is back, its transaction ended
            assert again.records.own(42, record_id) is None
    finally:
        engine.dispose()


class CountingSessions(sessionmaker[Session]):
    """A session factory that counts the sessions it makes."""

    made = 0

    def __call__(self, **local_kw: Any) -> Session:
        self.made += 1
        return super().__call__(**local_kw)


def _orm_insert(uow: UnitOfWork, user_id: int) -> int:
    """A record written through the unit of work's ORM session."""
    return int(
        uow.session.execute(
            text("INSERT INTO assessment_records (user_id) VALUES (:user) RETURNING id"), {"user": user_id}
        ).scalar_one()
    )


def test_a_unit_of_work_of_plain_statements_makes_no_orm_session(engine: Engine) -> None:
    """A user's calls run on psycopg alone: the Session is made only when a repository asks for it."""
    factory = CountingSessions(engine, expire_on_commit=False)
    with UnitOfWork(factory) as uow:
        record_id = uow.records.add(42).id
        assert uow.records.start_own(42, record_id) is not None
        uow.commit()
    assert factory.made == 0
    with UnitOfWork(factory) as uow:
        assert uow.records.user_page(42, None, 10)[1] == 1  # an ORM read
    assert factory.made == 1


def test_the_session_and_the_plain_statements_share_one_transaction(engine: Engine) -> None:
    factory = make_session_factory(engine)
    with UnitOfWork(factory) as uow:
        plain = uow.records.add(42).id
        orm = _orm_insert(uow, 42)
        backend = uow.session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with driver.statements(uow, pipeline=False) as conn:
            assert conn.execute("SELECT pg_backend_pid()").fetchone() == (backend,)
        # Not committed: both gone.
    with UnitOfWork(factory) as uow:
        assert uow.records.own(42, plain) is None
        assert uow.records.own(42, orm) is None
    with UnitOfWork(factory) as uow:
        plain = uow.records.add(42).id
        orm = _orm_insert(uow, 42)
        uow.commit()
    with UnitOfWork(factory) as uow:
        assert uow.records.own(42, plain) is not None
        assert uow.records.own(42, orm) is not None


def test_plain_statements_after_the_sessions_commit_are_committed_by_the_next(engine: Engine) -> None:
    """The session's commit ends the transaction; a plain statement after it begins the next one,
    which the unit of work's next commit ends (and its rollback drops)."""
    factory = make_session_factory(engine)
    with UnitOfWork(factory) as uow:
        first = _orm_insert(uow, 42)
        uow.commit()
        second = uow.records.add(42).id
        uow.commit()
        third = uow.records.add(42).id
        uow.rollback()
        fourth = _orm_insert(uow, 42)
        fifth = uow.records.add(42).id
        uow.commit()
    with UnitOfWork(factory) as uow:
        kept = {r: uow.records.own(42, r) is not None for r in (first, second, third, fourth, fifth)}
    assert kept == {first: True, second: True, third: False, fourth: True, fifth: True}


def test_a_session_factory_not_bound_to_an_engine_is_refused() -> None:
    with pytest.raises(TypeError, match="bound to an Engine"):
        UnitOfWork(sessionmaker())
