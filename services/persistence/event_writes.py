"""The event log's writes: the one INSERT every writer shares, the repository a unit of work
uses to write the events of a change in the change's own transaction, and the same INSERT as a
part of the very statement that makes a change (`change_logged`).

An event carries its own unique id and time, so storing it twice is a no-op
(``ON CONFLICT DO NOTHING`` on the primary key ``(occurred_at, id)``). The reads and the
direct writer are in services/persistence/event_store.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.domain.events import Event, EventType, Route, routed
from services.persistence.driver import Repository, statements

# In psycopg's parameter style: a unit of work's events go on its psycopg connection
# (services/persistence/driver.py), in the round trip of its change's statements; other
# writers use the SQLAlchemy form (`_INSERT`) on their sessions.
_INSERT_SQL = """
    INSERT INTO event_log (id, occurred_at, event_type, record_id, user_id, actor, data)
    SELECT * FROM unnest(
        CAST(%(ids)s AS uuid[]), CAST(%(times)s AS timestamptz[]), CAST(%(types)s AS varchar[]),
        CAST(%(records)s AS bigint[]), CAST(%(users)s AS bigint[]), CAST(%(actors)s AS varchar[]),
        CAST(%(data)s AS jsonb[]))
    ON CONFLICT DO NOTHING
    """
_INSERT = text(re.sub(r"%\((\w+)\)s", r":\1", _INSERT_SQL))
# One event (a user's submission): plain values, where seven one-element arrays would each be
# dumped by psycopg item by item in Python.
_INSERT_ONE_SQL = """
    INSERT INTO event_log (id, occurred_at, event_type, record_id, user_id, actor, data)
    VALUES (CAST(%(id)s AS uuid), %(time)s, %(type)s, %(record)s, %(user)s, %(actor)s,
            CAST(%(data)s AS jsonb))
    ON CONFLICT DO NOTHING
    """


def change_logged(event_type: EventType, rows: str) -> str:
    """SQL: one `event_type` event for each row of `rows` (a query, or a CTE, with the record's
    `id` and `user_id`), dated by the transaction's clock, its actor the parameter ``%(actor)s``,
    its data empty. A data-modifying CTE of the statement that makes the change: a change of one
    statement writes its event in that statement, in its round trip. MisroutedEvent (at import)
    for a type that does not go with its change."""
    kind = routed(event_type, Route.CHANGE)
    return (
        "INSERT INTO event_log (id, occurred_at, event_type, record_id, user_id, actor, data)"  # noqa: S608 (constants)
        f" SELECT gen_random_uuid(), now(), '{kind}', id, user_id, CAST(%(actor)s AS varchar),"
        f" CAST('{{}}' AS jsonb) FROM {rows}"
    )


def insert_events(session: Session, events: Sequence[Event]) -> int:
    """Insert `events` in one statement (one array parameter per column, whatever their number).

    Events already stored (same occurred_at and id) are skipped: returns how many rows
    were new. The caller owns the transaction.
    """
    if not events:
        return 0
    result = session.execute(_INSERT, _columns(events))
    return int(getattr(result, "rowcount", 0) or 0)


def _columns(events: Sequence[Event]) -> dict[str, list[Any]]:
    """`_INSERT`'s parameters: one array per column."""
    return {
        "ids": [str(e.id) for e in events],
        "times": [e.occurred_at for e in events],
        "types": [e.event_type for e in events],
        "records": [e.record_id for e in events],
        "users": [e.user_id for e in events],
        "actors": [e.actor for e in events],
        "data": [json.dumps(e.data, ensure_ascii=False) for e in events],
    }


_AMEND = text(
    "UPDATE event_log SET data = data || CAST(:patch AS jsonb)"
    " WHERE occurred_at = ANY(CAST(:times AS timestamptz[])) AND id = ANY(CAST(:ids AS uuid[]))"
)


class EventRepository(Repository):
    """The event log inside a unit of work: the events of a database change written in the
    change's own transaction, so that they are stored if and only if it commits, with the
    change's time, whatever happens to the process after the commit."""

    def add(self, events: Sequence[Event]) -> None:
        """Insert `events` in the unit of work's transaction: one statement, in the round trip of
        the unit of work's `batch` when inside one."""
        if len(events) == 1:
            (event,) = events
            with statements(self._work, pipeline=False) as conn:
                conn.execute(
                    _INSERT_ONE_SQL,
                    {
                        "id": str(event.id),
                        "time": event.occurred_at,
                        "type": event.event_type,
                        "record": event.record_id,
                        "user": event.user_id,
                        "actor": event.actor,
                        "data": json.dumps(event.data, ensure_ascii=False),
                    },
                )
        elif events:
            with statements(self._work, pipeline=False) as conn:
                conn.execute(_INSERT_SQL, _columns(events))

    def amend(self, events: Sequence[Event], patch: dict[str, Any]) -> int:
        """Merge `patch` into the stored `data` of `events` (what was learnt after their commit,
        such as a job the queue refused); how many rows changed."""
        if not events:
            return 0
        result = self.session.execute(
            _AMEND,
            {
                "patch": json.dumps(patch, ensure_ascii=False),
                "times": sorted({e.occurred_at for e in events}),
                "ids": [str(e.id) for e in events],
            },
        )
        return int(getattr(result, "rowcount", 0) or 0)
