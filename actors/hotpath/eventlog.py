"""The event log on Redis: producers LPUSH to `eventlog:queue`, one consumer bulk-inserts.

Moving the queue into the table (日志队列入库), no event lost or stored twice:

- **One consumer at a time**: a lease (SET NX PX, `RedisLock`) its owner renews every
  cycle and only its owner releases; a standby takes over when it expires.
- **Reliable move**: one Lua call moves up to N entries (an LMOVE loop, one round
  trip) from the queue into `eventlog:backup`; the batch is inserted in one
  transaction (a single multi-row ``INSERT … SELECT FROM unnest(…) ON CONFLICT DO
  NOTHING``); then the backup is cleared.
- **Recovery**: whenever the backup is not empty — at start-up, after taking the lease
  over from a dead consumer, after a failed insert — it is replayed before anything new
  is moved. Event ids make the replay idempotent.
- **Nothing dropped, nothing stuck**: an entry that cannot be decoded (strictly:
  UTF-8, JSON, every field valid and storable, `services.events.Event.decode`) or that
  PostgreSQL refuses for a data reason (the batch is bisected until the refused rows
  stand alone, services/isolation.py) is moved verbatim to `eventlog:invalid` and the
  rest of the batch is stored. Only a Redis or connection error leaves the batch in the
  backup for the next cycle.
- Every script that changes the lists checks the lease's token, so a consumer that lost
  the lease can insert (harmless: idempotent) but never move or clear anything; a thread
  renews the lease while a batch is being stored.

The sink (`RedisEventSink`) LPUSHes; when Redis refuses, it writes the events straight
into PostgreSQL (`services.event_store.DirectEventWriter`, short timeouts), and when that
fails too it counts them in `services.events.dropped_events()` (`emit()` then returns
False; it never raises).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy.orm import Session, sessionmaker

from actors.hotpath.constants import DEFAULT_EVENTS_BATCH, DEFAULT_LOCK_TTL_MS, EventLogKeys
from actors.hotpath.lock import OWNER_CHECK, RedisLock
from services.event_partitions import PartitionManager
from services.event_store import DirectEventWriter, insert_events
from services.events import Event, EventsDropped, count_dropped
from services.isolation import write_isolating

logger = logging.getLogger(__name__)

#: Called with "moved" (the batch is in the backup, nothing inserted yet) and "inserted"
#: (committed, backup not cleared yet): tests interleave faults there.
Hook = Callable[[str], None]

# KEYS: lock, queue, backup. ARGV: token, n.
# {1, entries}: the backup was not empty, replay it. {0, entries}: up to n entries moved.
_TAKE = (
    OWNER_CHECK
    + """
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held > 0 then
  return {1, held}
end
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local item = redis.call('LMOVE', KEYS[2], KEYS[3], 'RIGHT', 'LEFT')
  if not item then
    break
  end
  out[i] = item
end
return {0, out}
"""
)

# KEYS: lock, backup, invalid. ARGV: token, invalid entries... The batch is stored: clear it.
_CLEAR = (
    OWNER_CHECK
    + """
if #ARGV > 1 then
  redis.call('LPUSH', KEYS[3], unpack(ARGV, 2))
end
redis.call('DEL', KEYS[2])
return {1}
"""
)


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


@dataclass
class ConsumeReport:
    owner: bool = True
    replayed: bool = False
    taken: int = 0
    inserted: int = 0
    invalid: list[bytes] = field(default_factory=list)


class EventLogConsumer:
    name = "events"

    def __init__(
        self,
        client: redis.Redis,
        session_factory: sessionmaker[Session],
        *,
        keys: EventLogKeys | None = None,
        token: str | None = None,
        partitions: PartitionManager | None = None,
    ) -> None:
        self.client = client
        self.session_factory = session_factory
        self.keys = keys or EventLogKeys()
        self.lock = RedisLock(client, self.keys.lock, token=token)
        self.partitions = partitions or PartitionManager(session_factory)
        self._take = client.register_script(_TAKE)
        self._clear = client.register_script(_CLEAR)
        self._acquisitions = 0

    def run_once(
        self,
        *,
        batch: int = DEFAULT_EVENTS_BATCH,
        lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        hook: Hook | None = None,
    ) -> ConsumeReport:
        """Replay the backup if it holds a batch, else move and store a new one."""
        report = ConsumeReport()
        if not self.lock.ensure(lock_ttl_ms):
            report.owner = False
            return report
        if self.lock.acquisitions != self._acquisitions:
            # Newly the owner: another consumer may have created partitions meanwhile.
            self._acquisitions = self.lock.acquisitions
            self.partitions.forget()
        reply = self._take(
            keys=[self.lock.key, self.keys.queue, self.keys.backup], args=[self.lock.token, batch]
        )
        if int(reply[0]) < 0:
            self.lock.held = False
            report.owner = False
            return report
        report.replayed = int(reply[0]) == 1
        entries: list[bytes] = list(reply[1])
        report.taken = len(entries)
        if not entries:
            return report
        if report.replayed:
            logger.warning("events: replaying %d event(s) left in %s", len(entries), self.keys.backup)
        with self.lock.kept_alive(lock_ttl_ms):
            self._store(entries, report, hook)
        cleared = self._clear(
            keys=[self.lock.key, self.keys.backup, self.keys.invalid], args=[self.lock.token, *report.invalid]
        )
        if int(cleared[0]) < 0:
            # Stored anyway (idempotent); the new owner replays the backup and finds them there.
            self.lock.held = False
            report.owner = False
        return report

    def _store(self, entries: list[bytes], report: ConsumeReport, hook: Hook | None) -> None:
        if hook is not None:
            hook("moved")
        events: list[tuple[Event, bytes]] = []
        for raw in entries:
            try:
                events.append((Event.decode(raw), raw))
            except Exception as exc:  # InvalidEvent, or anything decoding missed: never stuck
                logger.error("events: keeping an undecodable entry aside (%s): %r", exc, raw[:200])
                report.invalid.append(raw)
        self.partitions.ensure_for(event.occurred_at for event, _ in events)
        report.inserted, refused = self._insert(events)
        report.invalid += refused
        if hook is not None:
            hook("inserted")

    def _insert(self, events: list[tuple[Event, bytes]]) -> tuple[int, list[bytes]]:
        """Insert the batch in one transaction; rows PostgreSQL refuses are isolated and returned."""
        if not events:
            return 0, []
        with self.session_factory() as session:
            inserted, refused = write_isolating(
                session, events, lambda s, chunk: insert_events(s, [event for event, _ in chunk])
            )
            session.commit()
        for event, raw in refused:
            logger.error("events: PostgreSQL refused event %s; kept aside: %r", event.id, raw[:200])
        return inserted, [raw for _, raw in refused]

    def close(self) -> None:
        try:
            self.lock.release()
        except redis.RedisError:
            logger.warning("events: could not release the lock; it expires by itself")
