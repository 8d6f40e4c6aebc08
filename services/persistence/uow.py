"""The unit of work: the one place a database transaction begins and ends.

Service functions receive a `UnitOfWork`, enter it, and commit explicitly; leaving the
block without `commit()` rolls back. This keeps the transaction boundary visible in the
service code and out of Flask and Dramatiq. Inside it, the repositories work on its
transaction: `uow.records` (the assessment record and its answers), `uow.questions`,
`uow.reports`, and `uow.events` (the events of a change, committed with it), through the
driver's statements on its connection (services/persistence/driver.py) or through its ORM
`session`, by the kind of work (CONTRIBUTING.md, "PostgreSQL: one way per kind of work"); a
pipelined block (`batch`) refuses the session's statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import DatabaseUnavailable
from services.persistence import driver
from services.persistence.event_writes import EventRepository
from services.persistence.questions import QuestionRepository
from services.persistence.records import RecordRepository
from services.persistence.report_sql import ReportRepository


class UnitOfWork:
    records: RecordRepository
    questions: QuestionRepository
    reports: ReportRepository
    events: EventRepository

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        engine = session_factory.kw.get("bind")
        if not isinstance(engine, Engine):
            raise TypeError(f"a unit of work needs a session factory bound to an Engine, not {engine!r}")
        self._engine = engine
        self._session_factory = session_factory
        self._session: Session | None = None

    def __enter__(self) -> UnitOfWork:
        try:
            # Take the connection now (the pool checks it, services/persistence/pool_check.py):
            # "cannot reach the database" is then told apart from a failure inside the
            # transaction, see DatabaseUnavailable.
            # The pool's timeout (every connection busy for `pool_timeout`) is one of those:
            # a worker whose threads outnumber its pool waits, and a job that waited too long
            # has done nothing, so it spends no attempt.
            self._connection = self._engine.connect()
        except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
            raise DatabaseUnavailable(f"database unreachable: {getattr(exc, 'orig', None) or exc}") from exc
        self._session = None
        self.records = RecordRepository(self)
        self.questions = QuestionRepository(self)
        self.reports = ReportRepository(self)
        self.events = EventRepository(self)
        return self

    def connection(self) -> Connection:
        """The unit of work's connection, in a transaction (begun here if none is, as a Session
        begins one at its first statement). What the repositories' plain statements run on
        (services/persistence/driver.py)."""
        if not self._connection.in_transaction():
            self._connection.begin()
        return self._connection

    @property
    def session(self) -> Session:
        """An ORM session on the unit of work's connection and transaction, made at first use.

        Most units of work never make one: a user's calls and a report's generation run plain
        statements on psycopg (services/persistence/driver.py), and a Session's construction,
        transaction bookkeeping and close cost about three times the pool's checkout (50 µs per
        unit of work, measured in a loop of thread CPU). It takes the transaction as its own
        (`control_fully`): its commit and rollback are the unit of work's."""
        if self._session is None:
            self._session = self._session_factory(
                bind=self._connection, join_transaction_mode="control_fully"
            )
        return self._session

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Ends the transaction (rolled back unless committed) and hands the connection back.
        try:
            if self._session is not None:
                self._session.close()
                self._session = None
        finally:
            self._connection.close()

    @contextmanager
    def batch(self, *, commit: bool = False) -> Iterator[None]:
        """The statements the repositories run in the block go to the database in one round trip,
        at its end (they are pipelined on the unit of work's connection: services/persistence/driver.py).
        For writes: a read's result inside the block would send them early. Only repository
        methods that run on the driver (`driver.statements`) belong here: a statement of the
        session's (or any through SQLAlchemy) raises `driver.StatementInPipeline`.

        With `commit`, the block's end commits too, its COMMIT in the same round trip (a block
        left by an error commits nothing)."""
        with driver.statements(self) as conn:
            yield
            if commit:
                # The driver's COMMIT, queued in the pipeline; the unit of work's then finds the
                # transaction ended and sends nothing (as report_sql.write does, and for its reason:
                # the connection must not go back to the pool while the pipeline is open).
                conn.commit()
        if commit:
            self.commit()

    @contextmanager
    def autocommit(self) -> Iterator[None]:
        """Each statement the repositories run in the block commits on its own, in its one round
        trip (no BEGIN, no COMMIT: services/persistence/driver.py, `autocommitted`). For a unit of
        work whose every write is a single statement; opened first thing in it."""
        with driver.autocommitted(self):
            yield

    def commit(self) -> None:
        """Commit the transaction: the session's (its pending changes flushed first) when one
        was made, then the connection's, for statements run since on the driver."""
        if self._session is not None:
            self._session.commit()
        if self._connection.in_transaction():
            self._connection.commit()

    def rollback(self) -> None:
        if self._session is not None:
            self._session.rollback()
        if self._connection.in_transaction():
            self._connection.rollback()
