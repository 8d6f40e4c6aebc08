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
  UTF-8, JSON, every field valid and storable, `services.domain.events.Event.decode`) or that
  PostgreSQL refuses for a data reason (the batch is bisected until the refused rows
  stand alone, services/persistence/isolation.py) is moved verbatim to `eventlog:invalid` and the
  rest of the batch is stored. Only a Redis or connection error leaves the batch in the
  backup for the next cycle.
- Every script that changes the lists checks the lease's token, so a consumer that lost
  the lease can insert (harmless: idempotent) but never move or clear anything; a thread
  renews the lease while a batch is being stored.

The producers' side, the sink (`RedisEventSink`), is in redis_adapters/event_sink.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from sqlalchemy.orm import Session, sessionmaker

from hotpath.constants import DEFAULT_EVENTS_BATCH, DEFAULT_LOCK_TTL_MS
from observability.logs import readable
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.lock import RedisLock
from redis_adapters.lua_scripts import lua_source
from services.domain.events import Event
from services.persistence.event_writes import insert_events
from services.persistence.isolation import write_isolating
from services.persistence.partitions import PartitionManager

logger = logging.getLogger(__name__)

#: Called with "moved" (the batch is in the backup, nothing inserted yet) and "inserted"
#: (committed, backup not cleared yet): tests interleave faults there.
Hook = Callable[[str], None]

# KEYS: lock, queue, backup. ARGV: token, n.
# {1, entries}: the backup was not empty, replay it. {0, entries}: up to n entries moved.
_TAKE = lua_source("hotpath", "eventlog_take")

# KEYS: lock, backup, invalid. ARGV: token, invalid entries... The batch is stored: clear it.
_CLEAR = lua_source("hotpath", "eventlog_clear")


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
                logger.error("events: keeping an undecodable entry aside (%s): %s", exc, readable(raw))
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
            logger.error("events: PostgreSQL refused event %s; kept aside: %s", event.id, readable(raw))
        return inserted, [raw for _, raw in refused]

    def close(self) -> None:
        try:
            self.lock.release()
        except redis.RedisError:
            logger.warning("events: could not release the lock; it expires by itself")
