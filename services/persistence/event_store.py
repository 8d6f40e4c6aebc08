"""The event log's storage: the direct writer (DirectEventWriter) and the reads of `event_log`.

An event carries its own unique id and time, so storing it twice is a no-op
(``ON CONFLICT DO NOTHING`` on the primary key ``(occurred_at, id)``): the consumer may
replay a batch after a crash without duplicating anything. The events themselves, their
decoding and the sinks producers use are in services/domain/events.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, Engine, event, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from services.domain.errors import ParamError, RecordNotFound
from services.domain.events import Event, EventType
from services.domain.limits import is_id, is_strict_int
from services.domain.views import EventView, Page
from services.persistence.db import make_engine
from services.persistence.event_writes import insert_events
from services.persistence.isolation import write_isolating
from services.persistence.models import AUDIT_EVENTS, AssessmentRecord, EventLogEntry
from services.persistence.partitions import PartitionManager
from services.persistence.uow import UnitOfWork

#: Timeouts of the direct write (`DirectEventWriter`): a request waits at most about this long.
DIRECT_CONNECT_TIMEOUT_S = 2
DIRECT_STATEMENT_TIMEOUT_MS = 2_000
#: Page size bound of the admin query.
MAX_PAGE_SIZE = 100


class DirectEventWriter:
    """Writes events straight into `event_log`: the event sink's way while Redis refuses them or
    its list is full (redis_adapters/event_sink.py).

    The same idempotent insert as the consumer (ON CONFLICT DO NOTHING, so an event that
    also reaches Redis later is stored once), the same month partitions, and rows the
    database refuses isolated. Short timeouts throughout (connect, statement, lock, pool),
    because the caller is a request or a job that must not stall on a second dead server.
    Thread-safe; the engine is built at the first write, in the process a composition root built
    the writer in (after the fork).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        connect_timeout_s: int = DIRECT_CONNECT_TIMEOUT_S,
        statement_timeout_ms: int = DIRECT_STATEMENT_TIMEOUT_MS,
        transaction_pooling: bool | None = None,
    ) -> None:
        self.database_url = database_url
        #: None: DB_TRANSACTION_POOLING, read when the engine is built.
        self.transaction_pooling = transaction_pooling
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_ms = statement_timeout_ms
        self._lock = threading.Lock()
        self._state: tuple[sessionmaker[Session], PartitionManager] | None = None

    def _factory(self) -> tuple[sessionmaker[Session], PartitionManager]:
        with self._lock:
            if self._state is None:
                factory = self._make_factory()
                self._state = (factory, PartitionManager(factory))
            return self._state

    def _make_factory(self) -> sessionmaker[Session]:
        settings = Settings.from_env()
        pooling = (
            settings.db_transaction_pooling if self.transaction_pooling is None else self.transaction_pooling
        )
        engine = make_engine(
            self.database_url or settings.database_url,
            pool_size=1,
            max_overflow=4,
            transaction_pooling=pooling,
            connect_timeout_s=self.connect_timeout_s,
            pool_timeout_s=self.connect_timeout_s,
        )
        statement_ms, lock_ms = self.statement_timeout_ms, self.statement_timeout_ms // 2

        # Per transaction, not as connection options: a transaction-pooling proxy
        # (PgBouncer) refuses startup options and shares server sessions.
        @event.listens_for(engine, "begin")
        def short_timeouts(conn: Connection) -> None:
            conn.exec_driver_sql(
                f"SELECT set_config('statement_timeout', '{statement_ms}', true),"
                f" set_config('lock_timeout', '{lock_ms}', true)"
            )

        return sessionmaker(engine, expire_on_commit=False)

    def write(self, events: Sequence[Event]) -> tuple[int, list[Event]]:
        """Store `events`; (rows inserted, events the database refused). Raises when it is unreachable."""
        factory, partitions = self._factory()
        with self._lock:  # PartitionManager is not thread-safe
            partitions.ensure_for(event.occurred_at for event in events)
        with factory() as session:
            inserted, refused = write_isolating(session, events, insert_events)
            session.commit()
        return inserted, refused

    def dispose(self) -> None:
        with self._lock:
            if self._state is not None:
                bind = self._state[0].kw.get("bind")
                if isinstance(bind, Engine):
                    bind.dispose()
            self._state = None


# -- reads --------------------------------------------------------------------------------


def event_view(row: EventLogEntry) -> EventView:
    return EventView(
        id=str(row.id),
        event_type=row.event_type,
        occurred_at=row.occurred_at,
        record_id=row.record_id,
        user_id=row.user_id,
        actor=row.actor,
        data=dict(row.data or {}),
    )


def list_record_events(
    uow: UnitOfWork, record_id: int, page: int = 1, page_size: int = 20
) -> Page[EventView]:
    """The stored events of one record, oldest first (its history in order), paged.

    RecordNotFound (3241) when no record with that id was ever created and no event
    names it; soft-deleted records keep their history. Events still on their way
    through Redis appear once the consumer has ingested them (about one interval).
    """
    if not is_id(record_id):
        raise RecordNotFound()
    if (
        not is_strict_int(page)
        or not is_strict_int(page_size)
        or page < 1
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise ParamError(f"分页参数错误：page 从 1 开始，page_size 取 1 到 {MAX_PAGE_SIZE}")
    with uow:
        session = uow.session
        total = (
            session.scalar(
                select(func.count()).select_from(EventLogEntry).where(EventLogEntry.record_id == record_id)
            )
            or 0
        )
        if total == 0 and session.get(AssessmentRecord, record_id) is None:
            raise RecordNotFound()
        rows = session.scalars(
            select(EventLogEntry)
            .where(EventLogEntry.record_id == record_id)
            .order_by(EventLogEntry.occurred_at, EventLogEntry.id)
            .offset((page - 1) * page_size)
            .limit(page_size)
        ).all()
        items = [event_view(r) for r in rows]
    return Page(items=items, total=total, page=page, page_size=page_size)


def last_errors(uow: UnitOfWork, record_ids: Sequence[int]) -> dict[int, str]:
    """The error of each record's latest failed attempt (`report.generation_failed`), where one
    is stored: one query on the (record_id, occurred_at) index, newest event per record."""
    ids = sorted({r for r in record_ids if is_id(r)})
    if not ids:
        return {}
    newest = (
        select(
            EventLogEntry.record_id,
            EventLogEntry.data["error"].astext.label("error"),
            func.row_number()
            .over(partition_by=EventLogEntry.record_id, order_by=EventLogEntry.occurred_at.desc())
            .label("n"),
        )
        .where(
            EventLogEntry.record_id.in_(ids),
            EventLogEntry.event_type == EventType.REPORT_GENERATION_FAILED.value,
        )
        .subquery()
    )
    with uow:
        rows = uow.session.execute(select(newest.c.record_id, newest.c.error).where(newest.c.n == 1)).all()
    return {int(rid): str(error) for rid, error in rows if rid is not None and error}


def audit_page(
    session: Session,
    *,
    event_type: str | None,
    actor: str | None,
    since: datetime | None,
    until: datetime | None,
    offset: int,
    limit: int,
) -> tuple[list[EventLogEntry], int]:
    """The audit events (`admin.*`) matching, newest first, a page of them and how many match."""
    conditions: list[ColumnElement[bool]] = [text(AUDIT_EVENTS)]  # type: ignore[list-item]
    if event_type:
        conditions.append(EventLogEntry.event_type == event_type)
    if actor:
        conditions.append(EventLogEntry.actor == actor)
    if since:
        conditions.append(EventLogEntry.occurred_at >= since)
    if until:
        conditions.append(EventLogEntry.occurred_at < until)
    total = session.scalar(select(func.count()).select_from(EventLogEntry).where(*conditions)) or 0
    rows = session.scalars(
        select(EventLogEntry)
        .where(*conditions)
        .order_by(EventLogEntry.occurred_at.desc(), EventLogEntry.id)
        .offset(offset)
        .limit(limit)
    ).all()
    return list(rows), int(total)
