"""The pool's checkout check on a real PostgreSQL (services/persistence/pool_check.py): a connection
the server ended while pooled is replaced without an error; a busy connection costs no ping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from config.settings import Settings, normalize_database_url
from services.persistence import pool_check
from services.persistence.db import make_engine, make_session_factory
from services.persistence.uow import UnitOfWork
from tests.support.processes import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def watched(settings: Settings, clock: Clock, engine: Engine) -> Iterator[tuple[Engine, list[Any]]]:
    """An engine of one pooled connection checked by `pool_check` on `clock`, and the
    connections it pinged (the dialect's `do_ping` counted, then run)."""
    own = create_engine(normalize_database_url(settings.database_url), pool_size=1, max_overflow=0)
    pool_check.watch(own, idle_s=1.0, clock=clock)
    pinged: list[Any] = []
    ping = own.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pinged.append(dbapi_connection)
        return ping(dbapi_connection)

    own.dialect.do_ping = counted  # type: ignore[method-assign]
    try:
        yield own, pinged
    finally:
        own.dispose()


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(engine: Engine, pid: int) -> None:
    with engine.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()


def pooled_connection(engine: Engine) -> Any:
    """The DBAPI connection the pool holds (checked in), without checking it out."""
    with engine.connect() as conn:
        return conn.connection.driver_connection


def test_a_busy_connection_is_handed_out_without_a_ping(
    watched: tuple[Engine, list[Any]], clock: Clock
) -> None:
    own, pinged = watched
    first = backend_pid(own)  # a new connection: not pinged
    clock.now += 0.5
    assert backend_pid(own) == first
    assert pinged == []


def test_a_connection_idle_longer_than_idle_s_is_pinged(
    watched: tuple[Engine, list[Any]], clock: Clock
) -> None:
    own, pinged = watched
    first = backend_pid(own)
    clock.now += 1.5
    assert backend_pid(own) == first  # it answered the ping: kept
    assert len(pinged) == 1


def test_a_connection_the_server_ended_while_pooled_is_replaced_without_an_error(
    watched: tuple[Engine, list[Any]], engine: Engine, clock: Clock
) -> None:
    own, pinged = watched
    first = backend_pid(own)
    conn = pooled_connection(own)
    assert not pool_check.socket_has_data(conn)
    terminate(engine, first)
    # The server's FATAL message and end of file reach the socket once the backend has exited.
    wait_until(
        lambda: pool_check.socket_has_data(conn), timeout=10, what="the ended connection's socket readable"
    )
    # Used moments ago, yet pinged: its socket says something; the ping fails, the pool reconnects.
    second = backend_pid(own)
    assert second != first
    assert pinged
    assert pinged[0] is conn


def test_a_unit_of_work_on_connections_the_server_ended_starts_normally(
    settings: Settings, engine: Engine
) -> None:
    """The product's engine (make_engine): every pooled connection terminated, as a restart
    of PostgreSQL does; the next units of work run on new ones, none of them fails."""
    own = make_engine(settings.database_url, pool_size=2, max_overflow=0)
    factory = make_session_factory(own)
    try:
        with UnitOfWork(factory) as a, UnitOfWork(factory) as b:
            pids = [
                uow.session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
                for uow in (a, b)
            ]
            conns = [pool_check_connection(uow) for uow in (a, b)]
        for pid in pids:
            terminate(engine, pid)
        wait_until(
            lambda: all(pool_check.socket_has_data(c) for c in conns),
            timeout=10,
            what="ended sockets readable",
        )
        for _ in range(3):
            with UnitOfWork(factory) as uow:
                pid = uow.session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
                assert pid not in pids
    finally:
        own.dispose()


def pool_check_connection(uow: UnitOfWork) -> Any:
    return uow.session.connection().connection.driver_connection


def test_a_closed_connection_has_data_to_read(engine: Engine) -> None:
    """A connection closed on our side is not handed out as it is either (its ping fails)."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert not pool_check.socket_has_data(raw)
        conn.invalidate()
    assert pool_check.socket_has_data(raw)
