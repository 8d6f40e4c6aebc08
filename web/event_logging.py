"""Logging the caller's actions to the event log (`eventlog:queue`) from the views.

Called after the service succeeded, so a refused request logs nothing; never raises
(services.domain.events.emit logs a failure and moves on; so does `settled`, for an event sent
with another store's call).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from services.domain.events import Event, EventType, emit, prepare_emit
from services.domain.prepared import PreparedCall
from web.auth import current_actor
from web.deps import event_sink


def log_event(
    event_type: EventType, *, record_id: int | None, user_id: int | None = None, **data: Any
) -> None:
    log_events(event_type, [record_id], user_id=user_id, **data)


def log_events(
    event_type: EventType, record_ids: Iterable[int | None], *, user_id: int | None = None, **data: Any
) -> None:
    """One event per record, all in one round trip."""
    emit(event_sink(), *new_events(event_type, record_ids, user_id=user_id, **data))


def new_events(
    event_type: EventType, record_ids: Iterable[int | None], *, user_id: int | None = None, **data: Any
) -> list[Event]:
    """One event per record, of the caller (`current_actor`), not sent yet."""
    actor = current_actor()
    return [
        Event.new(event_type, record_id=record_id, user_id=user_id, actor=actor, data=data)
        for record_id in record_ids
    ]


def prepare_log_event(
    event_type: EventType, *, record_id: int | None, user_id: int | None = None, **data: Any
) -> tuple[list[Event], PreparedCall]:
    """`log_event(...)` made ready, to send with other stores' calls (services/domain/prepared.py):
    the events, and the call whose outcome `services.domain.events.settled` takes."""
    events = new_events(event_type, [record_id], user_id=user_id, **data)
    return events, prepare_emit(event_sink(), events)
