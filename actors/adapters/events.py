"""The event sink on Redis (`services.events.EventSink`): web, worker and reconciler LPUSH
their events to `eventlog:queue`; the hot path's event-log consumer (actors/hotpath/eventlog.py)
bulk-inserts them.

When Redis refuses, the sink writes the events straight into PostgreSQL (its fallback,
`services.event_store.DirectEventWriter`, short timeouts), and when that fails too it counts
them in `services.events.dropped_events()` (`emit()` then returns False; it never raises).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence

import redis

from actors.adapters.keys import EventLogKeys
from services.event_store import DirectEventWriter
from services.events import Event, EventsDropped, count_dropped

logger = logging.getLogger(__name__)


#: After Redis failed, events go straight to PostgreSQL for this long before Redis is tried
#: again, so a dead (or black-holed) Redis costs one timeout a second, not one per request.
REDIS_RETRY_AFTER_S = 1.0
#: After the direct write failed too, events are counted as dropped for this long without
#: trying, for the same reason.
DATABASE_RETRY_AFTER_S = 1.0


class RedisEventSink:
    """`services.events.EventSink` on the Redis list `eventlog:queue` (one LPUSH per call).

    When Redis fails the events are written to PostgreSQL directly; when that fails too
    they are counted (`services.events.dropped_events()`), logged with the running count,
    and `EventsDropped` is raised (`emit()` returns False for it, without logging again).
    Nothing else is raised.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: EventLogKeys | None = None,
        *,
        fallback: DirectEventWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.keys = keys or EventLogKeys()
        #: Built lazily from DATABASE_URL unless given; connects only when Redis fails.
        self.fallback = fallback if fallback is not None else DirectEventWriter()
        self.clock = clock
        self._redis_retry_at = 0.0
        self._database_retry_at = 0.0
        self._redis_down = False
        self._state_lock = threading.Lock()

    def emit_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        if self.clock() >= self._redis_retry_at:
            try:
                self.client.lpush(self.keys.queue, *[wire_format(e) for e in events])
            except Exception as exc:  # any failure to hand over: take the other way
                self._redis_failed(exc)
            else:
                self._redis_ok()
                return
        self._write_direct(events)

    def _redis_failed(self, exc: Exception) -> None:
        with self._state_lock:
            self._redis_retry_at = self.clock() + REDIS_RETRY_AFTER_S
            first = not self._redis_down
            self._redis_down = True
        if first:
            logger.warning("events: Redis refused the event log (%s); writing events to PostgreSQL", exc)

    def _redis_ok(self) -> None:
        if self._redis_down:
            with self._state_lock:
                recovered, self._redis_down = self._redis_down, False
            if recovered:
                logger.info("events: Redis takes the event log again")

    def _write_direct(self, events: Sequence[Event]) -> None:
        if self.clock() < self._database_retry_at:
            self._drop(events, "PostgreSQL failed moments ago")
            return
        try:
            _, refused = self.fallback.write(events)
        except Exception as exc:
            self._database_retry_at = self.clock() + DATABASE_RETRY_AFTER_S
            self._drop(events, f"PostgreSQL failed too: {exc}")
            return
        if refused:
            self._drop(refused, "PostgreSQL refused them")

    def _drop(self, events: Sequence[Event], why: str) -> None:
        total = count_dropped(len(events))
        logger.error(
            "events: dropped %d event(s) (%s, record %s): %s; %d dropped by this process so far",
            len(events),
            events[0].event_type,
            events[0].record_id,
            why[:300],
            total,
        )
        raise EventsDropped(f"{len(events)} event(s) dropped: {why[:300]}")


def wire_format(event: Event) -> bytes:
    """The entry LPUSHed for `event`: its JSON in UTF-8.

    An event carrying a lone surrogate (which UTF-8 cannot encode) goes as ASCII JSON
    instead, with the surrogate escaped: the consumer then keeps it aside in
    `eventlog:invalid` rather than the producer losing it.
    """
    text = event.encode()
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(json.loads(text), ensure_ascii=True, separators=(",", ":")).encode("ascii")
