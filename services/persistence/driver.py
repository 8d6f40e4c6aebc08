"""The unit of work's psycopg connection, for the statements that skip SQLAlchemy's layers.

The hot statements (a report's generation, a user's submission) run on psycopg directly,
inside the unit of work's transaction, often pipelined: one round trip for several
statements and no statement building or result processing in Python. The connection is
still the unit of work's: checked out (and pinged) by it, committed by it, so the
transaction boundary and the "database unreachable" contract stay the unit of work's.

`statements` is what the repositories use: the connection (in pipeline mode for several
statements), with psycopg's errors raised as SQLAlchemy's (`sa_exc.DBAPIError.instance`, the
translation SQLAlchemy applies to its own statements), so that callers keep telling an
unreachable database (OperationalError, InterfaceError) from a failed statement as they
always have.

A pipeline carries the driver's statements only: SQLAlchemy (the ORM session, a
`Connection.execute`) reads each statement's result as it runs and does not expect a
connection in pipeline mode. Every engine refuses such a statement while the connection's
pipeline is open (`refuse_sqlalchemy_in_pipelines`, installed by `db.make_engine`): it raises
`StatementInPipeline` before anything is sent, so a session statement inside `uow.batch()`
fails at once, in tests, instead of corrupting a round trip under load.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

import psycopg
from psycopg import pq
from sqlalchemy import Connection, Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session


class StatementInPipeline(RuntimeError):
    """A statement through SQLAlchemy on a connection in pipeline mode (inside `uow.batch()` or
    a repository's pipelined block): a programming error, refused before anything is sent."""


class Transactional(Protocol):
    """What holds a transaction: a unit of work (services/persistence/uow.py) or a Session."""

    def connection(self) -> Connection:
        """The SQLAlchemy connection, in a transaction (begun by this call if none is)."""
        ...


class Work(Transactional, Protocol):
    """What the repositories work on: a unit of work's transaction, and its ORM session for the
    statements that go through SQLAlchemy (made at first use: services/persistence/uow.py)."""

    @property
    def session(self) -> Session: ...

    def commit(self) -> None: ...


class Repository:
    """A repository of a unit of work: its plain statements on the unit of work's connection
    (`statements(self._work)`), the others on its ORM `session` (made when first asked for)."""

    def __init__(self, work: Work) -> None:
        self._work = work

    @property
    def session(self) -> Session:
        return self._work.session


def connection(work: Transactional) -> psycopg.Connection[Any]:
    """The psycopg connection of the transaction (a unit of work's)."""
    return cast("psycopg.Connection[Any]", work.connection().connection.driver_connection)


@contextmanager
def pipelined(work: Transactional) -> Iterator[psycopg.Connection[Any]]:
    """The unit of work's psycopg connection in pipeline mode, for one round trip.

    Should the pipeline fail to end (psycopg's "cannot exit pipeline mode while busy", after a
    connection fault), the connection stays in pipeline mode with a reply pending, and the
    pool would hand it to the next unit of work, whose first use fails ("can't change
    'autocommit' now: connection in transaction status ACTIVE"; found by the soak, a group's
    job then failed its run alone). Such a connection is invalidated instead: the pool drops
    it and opens a fresh one.
    """
    conn = connection(work)
    try:
        with conn.pipeline():
            yield conn
    except BaseException:
        if not reusable(conn):
            work.connection().invalidate()
        raise


@contextmanager
def statements(work: Transactional, *, pipeline: bool = True) -> Iterator[psycopg.Connection[Any]]:
    """The unit of work's psycopg connection, with psycopg's errors raised as SQLAlchemy's: what the
    repositories use.

    With `pipeline` the block's statements go in pipeline mode: its end is their one round trip
    (their BEGIN included), their results are read after it (reading one inside syncs there, and
    the end then costs a second, empty round trip). psycopg's pipeline costs more CPU than a
    round trip it saves for one statement (about 300 against 220 µs for BEGIN, a SELECT and
    COMMIT, measured here), so a lone statement goes without. Inside a pipeline already open
    on the connection (the unit of work's `batch`), the statements join it either way.
    """
    conn = connection(work)
    try:
        if not pipeline or conn.autocommit or conn.pgconn.pipeline_status != pq.PipelineStatus.OFF:
            # In autocommit (`autocommitted`) there is no BEGIN to save: statements one by one.
            yield conn
            return
        with pipelined(work) as conn:
            yield conn
    except psycopg.Error as exc:
        lost = conn.closed
        if lost:
            # As SQLAlchemy does after a disconnect in a statement of its own: the unit of work's
            # rollback then skips the dead connection and the pool replaces it.
            work.connection().invalidate()
        raise translated(exc, invalidated=lost) from exc


@contextmanager
def autocommitted(work: Transactional) -> Iterator[None]:
    """Each statement run on the unit of work's connection in the block is a transaction of its own,
    committed as it ends: one round trip, where a transaction costs three (BEGIN, the statement,
    COMMIT; psycopg sends BEGIN on its own outside pipeline mode). For units of work whose every
    write is one statement: nothing is left to commit or roll back when the block ends.

    The connection must have no transaction open (the block comes first in its unit of work); it
    goes back to transactions when the block ends, before the pool can see it again.
    """
    conn = connection(work)
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise RuntimeError("autocommitted() inside a transaction: its statements would not be their own")
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            conn.autocommit = False
        elif not conn.closed:
            # A statement left running by an interruption: the pool must not get it back.
            work.connection().invalidate()


def refuse_sqlalchemy_in_pipelines(engine: Engine) -> None:
    """Make `engine` raise `StatementInPipeline` for a statement of its own (the ORM session's,
    a `Connection.execute`) while the psycopg connection's pipeline is open."""
    event.listen(engine, "before_cursor_execute", _refuse_in_pipeline)


def _refuse_in_pipeline(conn: Connection, cursor: object, statement: str, *_: object) -> None:
    pgconn = getattr(conn.connection.driver_connection, "pgconn", None)
    if pgconn is not None and pgconn.pipeline_status != pq.PipelineStatus.OFF:
        raise StatementInPipeline(
            "a statement through SQLAlchemy (the ORM session or a Connection) inside a pipelined"
            " block (uow.batch()): only the driver's statements (services/persistence/driver.py)"
            f" belong there; run it before or after the block: {statement[:200]!r}"
        )


def translated(exc: psycopg.Error, *, invalidated: bool = False) -> sa_exc.DBAPIError:
    """`exc` as SQLAlchemy raises it from a statement of its own (OperationalError, IntegrityError, ...)."""
    return cast(
        "sa_exc.DBAPIError",
        sa_exc.DBAPIError.instance(None, None, exc, psycopg.Error, connection_invalidated=invalidated),
    )


def reusable(conn: psycopg.Connection[Any]) -> bool:
    """Out of pipeline mode and not waiting for a reply (a closed one the pool's ping drops)."""
    return conn.closed or (
        conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        and conn.info.transaction_status != pq.TransactionStatus.ACTIVE
    )


def connection_lost(exc: BaseException | None) -> bool:
    """Did this error end the connection (rather than the statement)? A group whose COMMIT
    was in the pipeline when it happened may have committed: its outcome is unknown."""
    if isinstance(exc, sa_exc.DBAPIError):
        exc = exc.orig
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
