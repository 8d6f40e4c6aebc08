"""The event sink on Redis (`services.domain.events.EventSink`): web, worker and reconciler LPUSH
their events to `eventlog:queue`; the hot path's event-log consumer (hotpath/eventlog_consumer.py)
bulk-inserts them.

When Redis refuses, the sink writes the events straight into PostgreSQL (its fallback,
`services.persistence.event_store.DirectEventWriter`, short timeouts), and when that fails too it holds
them in memory (up to HOLD_MAX events) and a thread of its own hands them over again every
HOLD_RETRY_S, through Redis or PostgreSQL, whichever answers first. With a spool folder
(EVENT_SPOOL_DIR, redis_adapters/event_spool.py) the held events are on disk as well, and
the next process started on the host hands over those of a process that ended holding
them: an outage of both servers loses no event even when the process is killed meanwhile.
Only events beyond the hold are counted in `services.domain.events.dropped_events()`
(`emit()` then returns False; it never raises).

The list is bounded (EVENT_LOG_QUEUE_MAX): while the consumer is stopped or behind and the
list holds that many entries, new events take the same direct way instead of growing
Redis's memory without end. The length check and the LPUSH are one script, so a bound
costs no round trip and holds on a Redis Cluster slot.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

import redis

from config.settings import DEFAULT_EVENT_LOG_QUEUE_MAX
from redis_adapters.event_spool import EventSpool
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.lua_scripts import lua_source
from services.domain.events import Event, EventsDropped, count_dropped
from services.persistence.event_store import DirectEventWriter

logger = logging.getLogger(__name__)


#: After Redis failed, events go straight to PostgreSQL for this long before Redis is tried
#: again, so a dead (or black-holed) Redis costs one timeout a second, not one per request.
REDIS_RETRY_AFTER_S = 1.0
#: Most entries one script call pushes (Lua's unpack has a stack limit of about 8,000).
PUSH_CHUNK = 1_000

#: LPUSH as many of ARGV[2..] to KEYS[1] as fit below ARGV[1] entries, in order; how many.
_BOUNDED_LPUSH = lua_source("redis_adapters", "eventlog_bounded_lpush")

#: After the direct write failed too, events are held without trying it for this long, for
#: the same reason.
DATABASE_RETRY_AFTER_S = 1.0
#: Most events held in memory while neither Redis nor PostgreSQL takes them (about 1 KB
#: each); events beyond are counted as dropped.
HOLD_MAX = 10_000
#: How often the held events are handed over again (real time).
HOLD_RETRY_S = 1.0


class RedisEventSink:
    """`services.domain.events.EventSink` on the Redis list `eventlog:queue` (one LPUSH per call).

    When Redis fails the events are written to PostgreSQL directly; when that fails too
    they are held in memory and handed over again every HOLD_RETRY_S by a thread of the
    sink's own, until one of the two takes them. Events beyond HOLD_MAX (and those the
    database refuses as invalid) are counted (`services.domain.events.dropped_events()`),
    logged with the running count, and `EventsDropped` is raised (`emit()` returns False
    for it, without logging again). Nothing else is raised.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: EventLogKeys | None = None,
        *,
        fallback: DirectEventWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_queue: int = DEFAULT_EVENT_LOG_QUEUE_MAX,
        spool: EventSpool | None = None,
    ) -> None:
        """`spool`: where held events are kept on disk too; given, the events of processes that
        ended holding theirs are taken over at once, by a thread (see `take_over_spooled`)."""
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self.client = client
        self.keys = keys or EventLogKeys()
        self.max_queue = max_queue
        self._push = client.register_script(_BOUNDED_LPUSH)
        self._full = False
        #: Events written directly because the list was full, since it last took one.
        self._diverted = 0
        #: Built lazily from DATABASE_URL unless given; connects only when Redis fails.
        self.fallback = fallback if fallback is not None else DirectEventWriter()
        self.clock = clock
        self._redis_retry_at = 0.0
        self._database_retry_at = 0.0
        self._redis_down = False
        self._state_lock = threading.Lock()
        #: Events neither server took, oldest first, and the thread handing them over again.
        self._held: deque[Event] = deque()
        self._retrier: threading.Thread | None = None
        self._holding = False  # since the first event held, until the retrier handed all over
        self.spool = spool
        self._spool_failed = False
        if spool is not None:
            threading.Thread(target=self.take_over_spooled, name="event-sink-spool", daemon=True).start()

    def emit_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        self._send(events)

    def _send(self, events: Sequence[Event], *, spooled: bool = False) -> None:
        """Through Redis, else PostgreSQL, else held (`_hold`; `spooled`: on disk already)."""
        if self.clock() >= self._redis_retry_at:
            try:
                left = self._push_bounded(events)
            except Exception as exc:  # any failure to hand over: take the other way
                self._redis_failed(exc)
            else:
                # Redis answered: the events it had no room for go to PostgreSQL.
                self._redis_ok()
                if left:
                    self._queue_full(len(left))
                    self._write_direct(left, spooled=spooled)
                return
        self._write_direct(events, spooled=spooled)

    def _push_bounded(self, events: Sequence[Event]) -> Sequence[Event]:
        """Push `events` in chunks while the list has room; the events not pushed."""
        for start in range(0, len(events), PUSH_CHUNK):
            chunk = events[start : start + PUSH_CHUNK]
            pushed = self._push(
                keys=[self.keys.queue], args=[self.max_queue, *map(wire_format, chunk)], client=self.client
            )
            if self._not_taken(chunk, int(pushed)):
                return events[start + int(pushed) :]
        return ()

    def _not_taken(self, chunk: Sequence[Event], pushed: int) -> Sequence[Event]:
        """The events of a pushed chunk the list had no room for (it took the first `pushed`); a
        chunk taken whole while the list was full says it drained."""
        if pushed < len(chunk):
            return chunk[pushed:]
        if self._full:
            self._queue_drained()
        return ()

    def _queue_full(self, count: int) -> None:
        with self._state_lock:
            first = not self._full
            self._full = True
            self._diverted += count
        if first:
            logger.warning(
                "events: %s holds %d entries or more (EVENT_LOG_QUEUE_MAX; is the hot path's "
                "event-log consumer running?); writing events to PostgreSQL until it drains",
                self.keys.queue,
                self.max_queue,
            )

    def _queue_drained(self) -> None:
        with self._state_lock:
            was_full, self._full = self._full, False
            diverted, self._diverted = self._diverted, 0
        if was_full:
            logger.info(
                "events: %s takes events again; %d event(s) went to PostgreSQL meanwhile",
                self.keys.queue,
                diverted,
            )

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

    def _write_direct(self, events: Sequence[Event], *, spooled: bool = False) -> None:
        if self.clock() < self._database_retry_at:
            self._hold(events, "PostgreSQL failed moments ago", spooled=spooled)
            return
        try:
            _, refused = self.fallback.write(events)
        except Exception as exc:
            self._database_retry_at = self.clock() + DATABASE_RETRY_AFTER_S
            self._hold(events, f"PostgreSQL failed too: {exc}", spooled=spooled)
            return
        if refused:
            self._drop(refused, "PostgreSQL refused them")

    @property
    def held(self) -> int:
        """Events held in memory now, waiting for Redis or PostgreSQL."""
        with self._state_lock:
            return len(self._held)

    def _hold(self, events: Sequence[Event], why: str, *, spooled: bool = False) -> None:
        """Keep `events` for the retrier (started if none runs), on disk too unless `spooled`
        already; those beyond HOLD_MAX are dropped."""
        with self._state_lock:
            room = max(0, HOLD_MAX - len(self._held))
            kept, over = events[:room], events[room:]
            first = bool(kept) and not self._holding
            self._holding = self._holding or bool(kept)
            self._held.extend(kept)
            if kept and not spooled:
                self._spool(kept)
            retrier = None
            if kept and self._retrier is None:
                retrier = threading.Thread(target=self._hand_over_held, name="event-sink-hold", daemon=True)
                self._retrier = retrier
        if first and not spooled:
            logger.warning(
                "events: neither Redis nor PostgreSQL takes events (%s); holding them in memory%s, "
                "handed over again every %.0f s",
                why[:300],
                "" if self.spool is None else f" and in {self.spool.path}",
                HOLD_RETRY_S,
            )
        if retrier is not None:
            retrier.start()
        if over:
            self._drop(over, f"{why[:200]}; {HOLD_MAX} events held in memory already")

    def _spool(self, events: Sequence[Event]) -> None:
        """On disk too (under the state lock); a spool that fails leaves them in memory only."""
        if self.spool is None:
            return
        try:
            self.spool.append(events)
        except OSError as exc:
            if not self._spool_failed:
                logger.error(
                    "events: cannot keep held events in %s (%s): they are in memory only, "
                    "lost should this process end before Redis or PostgreSQL takes them",
                    self.spool.folder,
                    exc,
                )
            self._spool_failed = True
        else:
            self._spool_failed = False

    def take_over_spooled(self) -> int:
        """Take over the events of processes that ended holding them (their spool files), as
        held events of this process: handed over by the retrier. How many."""
        if self.spool is None:
            return 0
        with self._state_lock:
            events = self.spool.take_over()
        if events:
            # Already in this process's file: take_over copied them there.
            with contextlib.suppress(EventsDropped):
                self._hold(events, "taken over from a process that ended", spooled=True)
        return len(events)

    def _hand_over_held(self) -> None:
        """The retrier: every HOLD_RETRY_S, hand the held events over again (through Redis,
        else PostgreSQL, else they are held again); ends once none is held."""
        delivered = 0
        while True:
            time.sleep(HOLD_RETRY_S)
            with self._state_lock:
                batch = list(self._held)
                self._held.clear()
                if not batch:
                    self._retrier = None
                    self._holding = False
                    if self.spool is not None:
                        with contextlib.suppress(OSError):
                            self.spool.clear()
                    break
            # Counted and logged when raised: beyond the hold, or refused by the database.
            # In the spool file already: it is emptied only once nothing is held.
            with contextlib.suppress(EventsDropped):
                self._send(batch, spooled=True)
            with self._state_lock:
                delivered += max(0, len(batch) - len(self._held))
        logger.info("events: the events held in memory were handed over (%d)", delivered)

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
