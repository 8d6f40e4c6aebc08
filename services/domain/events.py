"""The event log's value object: what users, admins and workers did, as immutable events, and
the one table that decides which way each type of event takes into `event_log` (`ROUTES`;
docs/events.md lists them with what happens when Redis or PostgreSQL refuses).

An event that records a database change is written by the change's own transaction
(services/usecases/change_events.py); an admin action's entry by a transaction of its own,
before the action (services/usecases/audit.py); any other event is handed to an `EventSink`
(the Redis list `eventlog:queue` in production, moved into the table by hotpath/) through
`emit()`, which never fails the action it records: it logs and counts a loss.

The events' shape and their strict decoding are here too, without a database: an entry that
`Event.decode` accepts is one the table will take.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from services.domain.errors import MiAssessmentError
from services.domain.limits import is_id
from services.domain.opsmodel import AUDIT_PREFIX

logger = logging.getLogger(__name__)

#: Longest event type and actor text stored (the columns' lengths).
MAX_TYPE_LENGTH = 64
MAX_ACTOR_LENGTH = 64
#: Largest encoded `data` object accepted, in characters of JSON.
MAX_DATA_CHARS = 16_000
#: Deepest nesting of objects and arrays accepted in `data` (events are flat; jsonb and
#: the recursive checks here stay far from their stack limits).
MAX_DATA_DEPTH = 32


class EventType(StrEnum):
    """The events this code base emits; the log stores any type text it is given."""

    RECORD_CREATED = "record.created"
    RECORD_STARTED = "record.started"
    RECORD_DELETED = "record.deleted"
    ANSWERS_SAVED = "answers.saved"
    ANSWERS_SUBMITTED = "answers.submitted"
    REPORT_GENERATED = "report.generated"
    REPORT_GENERATION_FAILED = "report.generation_failed"
    REPORT_DEAD_LETTERED = "report.dead_lettered"
    REPORT_REGENERATED = "report.regenerated"
    #: The reconciler found a record in status 3 with no job anywhere and queued one.
    REPORT_REQUEUED = "report.requeued"
    #: The reconciler set status 5 for a job dead-lettered while the database was down.
    REPORT_FAILURE_RECORDED = "report.failure_recorded"
    #: An admin deleted the record's waiting retry, its last job: status 5 without a dead letter.
    REPORT_RETRY_DELETED = "report.retry_deleted"


class Route(StrEnum):
    """A way into `event_log`."""

    #: In the transaction that makes the database change the event records: stored if and only
    #: if the change commits, with the change's time (`log_change`, or the change's statement).
    CHANGE = "change"
    #: Handed to an `EventSink` by `emit()`: Redis first, PostgreSQL directly while Redis
    #: refuses, held in memory and on disk while both do (redis_adapters/event_sink.py).
    QUEUE = "queue"
    #: An admin action's entry (``admin.<action>``), in a transaction of its own before the
    #: action; when it cannot be written the action is refused (services/usecases/audit.py).
    AUDIT = "audit"


_CHANGE, _QUEUE = frozenset({Route.CHANGE}), frozenset({Route.QUEUE})

#: Each event type's route. What records a database change goes with the change; what happened
#: outside the database (an answer saved in Redis, a failed attempt, a job the reconciler
#: queued) goes through the queue. A dead letter goes with status 5 when it sets it, through
#: the queue when it does not (another job alive, the job index unreadable, the database down).
ROUTES: Mapping[str, frozenset[Route]] = {
    EventType.RECORD_CREATED: _CHANGE,
    EventType.RECORD_STARTED: _CHANGE,
    EventType.RECORD_DELETED: _CHANGE,
    EventType.ANSWERS_SAVED: _QUEUE,
    EventType.ANSWERS_SUBMITTED: _CHANGE,
    EventType.REPORT_GENERATED: _CHANGE,
    EventType.REPORT_GENERATION_FAILED: _QUEUE,
    EventType.REPORT_DEAD_LETTERED: frozenset({Route.CHANGE, Route.QUEUE}),
    EventType.REPORT_REGENERATED: _CHANGE,
    EventType.REPORT_REQUEUED: _QUEUE,
    EventType.REPORT_FAILURE_RECORDED: _CHANGE,
    EventType.REPORT_RETRY_DELETED: _CHANGE,
}


class MisroutedEvent(ValueError):
    """An event sent a way its type does not take (`ROUTES`): a mistake in the code, not an outage."""


def routes_of(event_type: str) -> frozenset[Route]:
    """The routes `event_type` may take: `ROUTES`'s, AUDIT for ``admin.*``, none for any other."""
    if event_type.startswith(AUDIT_PREFIX):
        return frozenset({Route.AUDIT})
    return ROUTES.get(event_type, frozenset())


def routed(event_type: str, route: Route) -> str:
    """`event_type`, checked to take `route`; MisroutedEvent otherwise."""
    if route not in routes_of(event_type):
        raise MisroutedEvent(
            f"{event_type!r} does not go through {route.value!r} (services/domain/events.py)"
        )
    return event_type


def user_actor(user_id: int) -> str:
    """The actor a user's own actions are logged with."""
    return f"user:{user_id}"


class InvalidEvent(MiAssessmentError):
    """A log entry that cannot be decoded into an `Event` (kept aside, never dropped)."""


@dataclass(frozen=True)
class Event:
    id: uuid.UUID
    event_type: str
    occurred_at: datetime
    record_id: int | None = None
    user_id: int | None = None
    #: Who acted: "user:<id>", "admin:<token fingerprint>", "worker".
    actor: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        event_type: str,
        *,
        record_id: int | None = None,
        user_id: int | None = None,
        actor: str | None = None,
        data: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> Event:
        """A fresh event: a random id, the current time (UTC, microseconds) unless `at` says when."""
        return cls(
            id=uuid.uuid4(),
            event_type=str(event_type),
            occurred_at=at or datetime.now(UTC),
            record_id=record_id,
            user_id=user_id,
            actor=actor,
            data=dict(data or {}),
        )

    def encode(self) -> str:
        """Compact JSON, camelCase like the rest of the wire formats."""
        return json.dumps(
            {
                "id": str(self.id),
                "type": self.event_type,
                "occurredAt": self.occurred_at.isoformat(),
                "recordId": self.record_id,
                "userId": self.user_id,
                "actor": self.actor,
                "data": self.data,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> Event:
        """Parse and validate one log entry; InvalidEvent for anything the table would refuse.

        Strict: the entry must be UTF-8 (json.loads would also guess UTF-16 or UTF-32),
        and every text in it must be encodable as UTF-8 (a JSON escape such as
        ``\\ud800`` decodes to a lone surrogate, which neither the driver nor jsonb takes).
        """
        try:
            decoded = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
            payload = json.loads(decoded)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise InvalidEvent(f"not JSON: {str(exc)[:200]}") from None
        if not isinstance(payload, dict):
            raise InvalidEvent("not a JSON object")
        try:
            event_id = uuid.UUID(_text(payload, "id", 36))
        except ValueError:
            raise InvalidEvent("id is not a UUID") from None
        event_type = _text(payload, "type", MAX_TYPE_LENGTH)
        occurred_at = _time(payload.get("occurredAt"))
        actor = payload.get("actor")
        if actor is not None:
            actor = _text(payload, "actor", MAX_ACTOR_LENGTH)
        data = payload.get("data", {})
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidEvent("data is not an object")
        if _depth(data) > MAX_DATA_DEPTH:
            raise InvalidEvent(f"data is nested deeper than {MAX_DATA_DEPTH} levels")
        try:
            encoded = json.dumps(data, ensure_ascii=False, allow_nan=True)
            encoded.encode("utf-8")
        except (ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
            raise InvalidEvent(f"data cannot be stored: {str(exc)[:200]}") from None
        # PostgreSQL's jsonb refuses \u0000 and NaN/Infinity: refuse them here, not in the batch insert.
        if "\\u0000" in encoded or len(encoded) > MAX_DATA_CHARS or _has_non_finite(data):
            raise InvalidEvent("data holds NUL, a non-finite number, or is too large")
        for name, value in (("type", event_type), ("actor", actor)):
            if value is not None and not _encodable(value):
                raise InvalidEvent(f"{name} is not valid Unicode (a lone surrogate)")
        return cls(
            id=event_id,
            event_type=event_type,
            occurred_at=occurred_at,
            record_id=_optional_id(payload, "recordId"),
            user_id=_optional_id(payload, "userId"),
            actor=actor,
            data=data,
        )


def _text(payload: dict[str, Any], name: str, max_length: int) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value or len(value) > max_length or "\x00" in value:
        raise InvalidEvent(f"{name} must be a non-empty string of at most {max_length} characters")
    return value


def _time(value: object) -> datetime:
    if not isinstance(value, str):
        raise InvalidEvent("occurredAt must be an ISO-8601 string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidEvent(f"occurredAt is not ISO-8601: {value[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise InvalidEvent("occurredAt is out of range") from None


def _optional_id(payload: dict[str, Any], name: str) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if not is_id(value):
        raise InvalidEvent(f"{name} must be null or a positive bigint")
    return value


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _depth(value: object, level: int = 1) -> int:
    """Nesting depth of a JSON value (stops counting past MAX_DATA_DEPTH)."""
    if level > MAX_DATA_DEPTH:
        return level
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return max((_depth(child, level + 1) for child in children), default=level)


def _has_non_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


class EventsDropped(Exception):
    """A sink could store the events nowhere; it has already counted (`count_dropped`) and logged them."""


class EventSink(Protocol):
    """Where events go. Implementations may raise; callers go through `emit()`."""

    def emit_many(self, events: Sequence[Event]) -> None:
        """Hand over the events, in one round trip where possible."""


def emit(sink: EventSink | None, *events: Event) -> bool:
    """Hand `events` to `sink`; never raises for a failure of the sink (a lost line of the event
    log must not fail the action). MisroutedEvent for an event whose type does not go this way.

    Returns False (and logs, and counts the events in `dropped_events()`) when the sink failed.
    """
    for event in events:
        routed(event.event_type, Route.QUEUE)
    if sink is None or not events:
        return True
    try:
        sink.emit_many(events)
    except EventsDropped:
        return False  # counted and logged by the sink
    except Exception as exc:
        total = count_dropped(len(events))
        logger.error(
            "could not log %d event(s) (%s, record %s); %d event(s) dropped by this process so far",
            len(events),
            events[0].event_type,
            events[0].record_id,
            total,
            exc_info=exc,
        )
        return False
    return True


class _Counter:
    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()

    def add(self, count: int) -> int:
        with self.lock:
            self.value += count
            return self.value


_dropped = _Counter()


def dropped_events() -> int:
    """Events this process could store nowhere (neither Redis nor PostgreSQL) since it started."""
    with _dropped.lock:
        return _dropped.value


def count_dropped(count: int) -> int:
    """Add `count` lost events to the process-wide counter; the new total."""
    return _dropped.add(count)
