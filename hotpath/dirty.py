"""The dirty-set flush: Redis hashes to PostgreSQL (作答落盘 / 考生状态同步), losing nothing.

Writers put data in a per-record hash and add the record id to a dirty set. A flusher:

1. **claim** — RENAME dirty → syncing (nothing to do if dirty is absent), after merging
   back a syncing set a crashed cycle left behind (SUNIONSTORE), so nothing is skipped;
2. **read** — SMEMBERS syncing, then HGETALL of each record's hash, pipelined per chunk;
3. **write** — one database transaction per chunk, in bulk (the subclass's `persist`);
4. **done** — SREM the chunk from syncing; after the last chunk DEL syncing.

A failed write does not drop the marks: the ids go back to the dirty set
(SUNIONSTORE dirty dirty syncing) and are retried next cycle. A save made during a flush
re-adds its id to the dirty set, which the RENAME already emptied, so it is flushed again
next cycle: nothing saved is lost.

RENAME is only safe with one flusher at a time (a second RENAME would overwrite the first
one's syncing set). Each flow is guarded by a lease (`RedisLock`, SET NX PX): every step
that changes the dirty or syncing set is a Lua script that checks the lease's token, the
lease is renewed by a thread while the cycle works (`RedisLock.kept_alive`) and checked
again right before each commit, and a process that lost it stops at once (the new owner
merges the syncing set back).

No content stops the flow: a field the subclass cannot decode, or one the database
refuses for a data reason (services/persistence/isolation.py), is moved verbatim to the flow's
invalid list (`hotpath:answers:invalid`, entries from `invalid_entry`) and deleted from
its hash (if unchanged meanwhile), and the rest of the chunk is written. A key that is
not a hash is logged and skipped. Only errors of Redis or of the database connection
fail a cycle (the ids go back to the dirty set and are retried).
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
from redis.commands.core import Script
from sqlalchemy.orm import Session, sessionmaker

from hotpath.constants import DEFAULT_ANSWERS_BATCH, DEFAULT_LOCK_TTL_MS
from observability.logs import readable
from redis_adapters.keyspace import DirtyKeys
from redis_adapters.lock import RedisLock
from redis_adapters.lua_scripts import lua_source
from services.domain.limits import MAX_ID

logger = logging.getLogger(__name__)

#: Called between the steps of a cycle with "claimed", "read" (before the database write)
#: and "written" (after the commit): tests use it to interleave saves and faults.
Hook = Callable[[str], None]

# KEYS: lock, dirty, syncing. ARGV: token. Returns {count} (-1: not the owner).
_CLAIM = lua_source("hotpath", "dirty_claim")

# KEYS: lock, dirty, syncing. ARGV: token. The ids of a failed cycle go back to dirty.
_PUT_BACK = lua_source("hotpath", "dirty_put_back")

# KEYS: lock, syncing. ARGV: token, ids... Removes persisted ids (all of them if no ids: done).
_DONE = lua_source("hotpath", "dirty_done")


# KEYS: lock, record hash, invalid list. ARGV: token, then (field, value, entry) triples.
# Each entry is kept in the invalid list; its field is deleted only if it still holds the
# value read (a save made meanwhile stays). Returns {fields deleted}.
_SET_ASIDE = lua_source("hotpath", "dirty_set_aside")

#: A dirty mark: a record id as the save script writes it (no sign, no leading zero).
_MARK = re.compile(rb"[1-9][0-9]{0,18}")


def invalid_entry(record_id: int, field: bytes, value: bytes) -> bytes:
    """An entry of an invalid list: ``<record id>:<field length>:<field><value>``, verbatim.

    Field and value are kept byte for byte (they may be anything, even invalid UTF-8);
    the field's length in bytes tells where the value begins. `parse_invalid_entry` reads it.
    """
    return b"%d:%d:%s%s" % (record_id, len(field), field, value)


def parse_invalid_entry(entry: bytes) -> tuple[int, bytes, bytes]:
    """(record id, field, value) of an `invalid_entry`."""
    record, length, rest = entry.split(b":", 2)
    size = int(length)
    return int(record), rest[:size], rest[size:]


class LockLost(Exception):
    """The lease expired or was taken over during a cycle: stop, the new owner recovers."""


@dataclass
class FlushReport:
    #: False when another process holds the lease (this one is a standby).
    owner: bool = True
    claimed: int = 0
    persisted: int = 0
    rows: int = 0
    discarded: list[int] = field(default_factory=list)
    #: (record id, field, value) set aside in the invalid list.
    invalid: list[tuple[int, bytes, bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class Persisted:
    rows: int
    #: Records whose hash is useless now (e.g. no longer in progress): their keys are dropped.
    discard: Sequence[int] = ()
    #: (record id, field, value): fields that cannot be decoded or that the database refused;
    #: moved to the invalid list after the commit.
    invalid: Sequence[tuple[int, bytes, bytes]] = ()


class DirtySetFlusher(ABC):
    """One dirty-set flow; subclasses decode the hashes and write them to the database."""

    name = "flush"

    def __init__(
        self,
        client: redis.Redis,
        keys: DirtyKeys,
        session_factory: sessionmaker[Session],
        *,
        token: str | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.session_factory = session_factory
        self.lock = RedisLock(client, keys.lock, token=token)
        self._claim = client.register_script(_CLAIM)
        self._put_back = client.register_script(_PUT_BACK)
        self._done = client.register_script(_DONE)
        self._set_aside = client.register_script(_SET_ASIDE)

    @abstractmethod
    def persist(self, session: Session, hashes: dict[int, dict[bytes, bytes]]) -> Persisted:
        """Write the decoded hashes (record id -> raw hash) in the caller's transaction.

        Must not raise for anything in the hashes: report undecodable or refused fields
        in `Persisted.invalid` (services/persistence/isolation.py isolates what the database refuses).
        """

    def discard(self, record_ids: Sequence[int]) -> None:  # noqa: B027  (optional hook)
        """Drop the keys of records whose data can never be written (default: nothing)."""

    # ------------------------------------------------------------------ the cycle

    def run_once(
        self,
        *,
        batch: int = DEFAULT_ANSWERS_BATCH,
        lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        hook: Hook | None = None,
    ) -> FlushReport:
        """One flush cycle; raises (after putting the ids back) if Redis or the database fails."""
        report = FlushReport()
        if not self.lock.ensure(lock_ttl_ms):
            report.owner = False
            return report
        try:
            report.claimed = self._guarded(self._claim, [self.keys.dirty, self.keys.syncing])
        except LockLost:
            report.owner = False
            return report
        if report.claimed == 0:
            return report
        try:
            with self.lock.kept_alive(lock_ttl_ms):
                _step(hook, "claimed")
                ids = self._members()
                for start in range(0, len(ids), max(1, batch)):
                    chunk = ids[start : start + max(1, batch)]
                    self._flush_chunk(chunk, lock_ttl_ms, hook, report)
                self._guarded(self._done, [self.keys.syncing])
        except LockLost:
            logger.warning("%s: lost the lock mid-cycle; the new owner takes the ids back", self.name)
            report.owner = False
        except Exception:
            self._put_back_after_failure()
            raise
        return report

    def _flush_chunk(
        self, chunk: list[int], lock_ttl_ms: int, hook: Hook | None, report: FlushReport
    ) -> None:
        if not self.lock.renew(lock_ttl_ms):
            raise LockLost()
        pipe = self.client.pipeline(transaction=False)
        for record_id in chunk:
            pipe.hgetall(self.keys.item(record_id))
        hashes: dict[int, dict[bytes, bytes]] = {}
        for record_id, raw in zip(chunk, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(raw, redis.ResponseError):
                # Not a hash (WRONGTYPE): nothing a save wrote. Skipped, not retried for ever.
                logger.error("%s: skipping %s: %s", self.name, self.keys.item(record_id), raw)
            elif isinstance(raw, Exception):
                raise raw
            elif raw:
                hashes[record_id] = raw
        _step(hook, "read")
        outcome = Persisted(0)
        if hashes:
            with self.session_factory() as session:
                outcome = self.persist(session, hashes)
                # Fence: commit only while still the owner, so a process that lost the lease
                # cannot write behind the back of the one that took over.
                if not self.lock.renew(lock_ttl_ms):
                    raise LockLost()
                session.commit()
        _step(hook, "written")
        if outcome.invalid:
            self._set_aside_invalid(outcome.invalid)
            report.invalid.extend(outcome.invalid)
        if outcome.discard:
            self.discard(outcome.discard)
            report.discarded.extend(outcome.discard)
        self._guarded(self._done, [self.keys.syncing], *chunk)
        report.persisted += len(chunk)
        report.rows += outcome.rows

    def _set_aside_invalid(self, invalid: Sequence[tuple[int, bytes, bytes]]) -> None:
        by_record: dict[int, list[bytes]] = {}
        for record_id, name, value in invalid:
            logger.error(
                "%s: record %s: setting aside field %s=%s in %s",
                self.name,
                record_id,
                readable(name, 100),
                readable(value),
                self.keys.invalid,
            )
            by_record.setdefault(record_id, []).extend([name, value, invalid_entry(record_id, name, value)])
        for record_id, args in by_record.items():
            self._guarded(self._set_aside, [self.keys.item(record_id), self.keys.invalid], *args)

    def _members(self) -> list[int]:
        ids: list[int] = []
        bad: list[bytes | str] = []
        for member in self.client.smembers(self.keys.syncing):
            raw = member.encode() if isinstance(member, str) else bytes(member)
            if _MARK.fullmatch(raw) and int(raw) <= MAX_ID:
                ids.append(int(raw))
            else:
                bad.append(member)
        if bad:
            marks = ", ".join(readable(mark, 40) for mark in bad[:5])
            logger.error("%s: dropping %d malformed dirty mark(s): %s", self.name, len(bad), marks)
            self._guarded(self._done, [self.keys.syncing], *bad)
        return sorted(ids)

    def _put_back_after_failure(self) -> None:
        # Debug only: the loop logs the cycle's failure itself, once per outage (runner.py).
        try:
            count = self._guarded(self._put_back, [self.keys.dirty, self.keys.syncing])
            logger.debug("%s: cycle failed; %d record id(s) put back to the dirty set", self.name, count)
        except LockLost:
            pass
        except redis.RedisError as exc:
            # The next cycle's claim merges the syncing set back.
            logger.debug("%s: could not put the ids back now (%s); the next claim will", self.name, exc)

    def _guarded(self, script: Script, keys: list[str], *args: bytes | str | int) -> int:
        result = script(keys=[self.lock.key, *keys], args=[self.lock.token, *args])
        value = int(result[0])
        if value < 0:
            self.lock.held = False
            raise LockLost()
        return value

    def close(self) -> None:
        """Release the lease (at shutdown), so a standby takes over at once."""
        try:
            self.lock.release()
        except redis.RedisError:
            logger.warning("%s: could not release the lock; it expires by itself", self.name)


def _step(hook: Hook | None, name: str) -> None:
    if hook is not None:
        hook(name)
