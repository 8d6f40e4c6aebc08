"""The unit of work on a real PostgreSQL: "the database cannot be had" is DatabaseUnavailable."""

from __future__ import annotations

import pytest

from config.settings import Settings
from services.domain.errors import DatabaseUnavailable
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
