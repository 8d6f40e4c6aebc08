"""The unit of work: the one place a database transaction begins and ends.

Service functions receive a `UnitOfWork`, enter it, and commit explicitly; leaving the
block without `commit()` rolls back. This keeps the transaction boundary visible in the
service code and out of Flask and Dramatiq. Inside it, the repositories work on its
session: `uow.records` (the assessment record and its answers), `uow.questions`,
`uow.reports`, and `uow.events` (the events of a change, committed with it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import DatabaseUnavailable
from services.persistence import driver
from services.persistence.event_writes import EventRepository
from services.persistence.questions import QuestionRepository
from services.persistence.records import RecordRepository
from services.persistence.report_sql import ReportRepository


class UnitOfWork:
    session: Session
    records: RecordRepository
    questions: QuestionRepository
    reports: ReportRepository
    events: EventRepository

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory

    def __enter__(self) -> UnitOfWork:
        self.session = self._session_factory()
        try:
            # Take the connection now (the pool checks it, services/persistence/pool_check.py):
            # "cannot reach the database" is then told apart from a failure inside the
            # transaction, see DatabaseUnavailable.
            # The pool's timeout (every connection busy for `pool_timeout`) is one of those:
            # a worker whose threads outnumber its pool waits, and a job that waited too long
            # has done nothing, so it spends no attempt.
            self.session.connection()
        except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
            self.session.close()
            raise DatabaseUnavailable(f"database unreachable: {getattr(exc, 'orig', None) or exc}") from exc
        self.records = RecordRepository(self.session)
        self.questions = QuestionRepository(self.session)
        self.reports = ReportRepository(self.session)
        self.events = EventRepository(self.session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Ends the transaction (rolled back unless committed) and hands the connection back: an
        # explicit rollback() first would run SQLAlchemy's transaction machinery twice.
        self.session.close()

    @contextmanager
    def batch(self, *, commit: bool = False) -> Iterator[None]:
        """The statements the repositories run in the block go to the database in one round trip,
        at its end (they are pipelined on the unit of work's connection: services/persistence/driver.py).
        For writes: a read's result inside the block would send them early. Only repository
        methods that run on the driver (`driver.statements`) belong here, not the session's own
        statements (SQLAlchemy does not expect a connection in pipeline mode).

        With `commit`, the block's end commits too, its COMMIT in the same round trip (a block
        left by an error commits nothing)."""
        with driver.statements(self.session) as conn:
            yield
            if commit:
                # The driver's COMMIT, queued in the pipeline; the session's then finds the
                # transaction ended and sends nothing (as report_sql.write does, and for its reason:
                # the session must not hand the connection back while the pipeline is open).
                conn.commit()
        if commit:
            self.session.commit()

    @contextmanager
    def autocommit(self) -> Iterator[None]:
        """Each statement the repositories run in the block commits on its own, in its one round
        trip (no BEGIN, no COMMIT: services/persistence/driver.py, `autocommitted`). For a unit of
        work whose every write is a single statement; opened first thing in it."""
        with driver.autocommitted(self.session):
            yield

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()
