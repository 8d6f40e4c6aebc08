"""The events of a database change, written in the change's own transaction (their route,
`Route.CHANGE`: services/domain/events.py, docs/events.md).

An event that records a database change (a submission, a regeneration, a deletion) is written
by the transaction that makes the change: it is stored if and only if the change commits, with
the change's time, whatever happens to the process afterwards. Logged after the commit, it would be
lost with a process killed between the two, or stamped seconds after the change when Redis was
slow to take it (its job's attempts would then seem to precede the submission).

What is learnt after the commit (that the queue refused the job) is merged into the stored
event's data by `note_not_enqueued`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from services.domain.events import Event, EventType, Route, routed
from services.persistence.uow import UnitOfWork

logger = logging.getLogger(__name__)

#: The data merged into a change's events when the job it queues was refused.
NOT_ENQUEUED = {"enqueued": False}


def log_change(
    uow: UnitOfWork,
    event_type: EventType,
    record_ids: Iterable[int],
    *,
    at: datetime,
    actor: str | None,
    user_id: int | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[Event]:
    """Add one event per record to the open transaction of `uow` (the caller commits); the events.
    MisroutedEvent for a type that does not go with its change."""
    kind = routed(event_type, Route.CHANGE)
    events = [
        Event(
            id=uuid.uuid4(),
            event_type=kind,
            occurred_at=at,
            record_id=record_id,
            user_id=user_id,
            actor=actor,
            data=dict(data or {}),
        )
        for record_id in record_ids
    ]
    if events:
        uow.events.add(events)
    return events


def note_not_enqueued(uow: UnitOfWork, events: Sequence[Event]) -> None:
    """Mark the committed `events` as not followed by their job (the reconciler queues it later).

    Never raises: the change and its event stand; only this detail is lost when the database
    cannot be written either (logged).
    """
    if not events:
        return
    try:
        with uow:
            uow.events.amend(events, NOT_ENQUEUED)
            uow.commit()
    except Exception:
        logger.warning(
            "could not mark %d %s event(s) as not queued (record %s ...)",
            len(events),
            events[0].event_type,
            events[0].record_id,
            exc_info=True,
        )
