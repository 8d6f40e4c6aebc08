"""Logging the caller's actions that change no database row to the event log (`eventlog:queue`).

Called after the service succeeded, so a refused request logs nothing; never raises for an
outage (services.domain.events.emit logs a failure and moves on). The events of a database
change are written by the change itself (docs/events.md).
"""

from __future__ import annotations

from typing import Any

from services.domain.events import Event, EventType, emit
from web.auth import current_actor
from web.deps import event_sink


def log_event(
    event_type: EventType, *, record_id: int | None, user_id: int | None = None, **data: Any
) -> None:
    """One event of the caller (`current_actor`)."""
    event = Event.new(event_type, record_id=record_id, user_id=user_id, actor=current_actor(), data=data)
    emit(event_sink(), event)
