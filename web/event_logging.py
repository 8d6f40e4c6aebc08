"""Logging the caller's actions to the event log (`eventlog:queue`) from the views.

Called after the service succeeded, so a refused request logs nothing; never raises
(services.domain.events.emit logs a failure and moves on).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from services.domain.events import Event, EventType, emit
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
    actor = current_actor()
    events = [
        Event.new(event_type, record_id=record_id, user_id=user_id, actor=actor, data=data)
        for record_id in record_ids
    ]
    emit(event_sink(), *events)
