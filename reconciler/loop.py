"""The reconciler: every record in status 3 (生成中) gets its report job, without an admin.

The database is the record of work owed: a record in status 3 is owed a report, so it
must have a job in Redis (queued, in flight or delayed). Faults between the parts can
break that: a submission committed while Redis was down (its LPUSH failed), a web
process killed between its commit and its LPUSH, a Redis restart that lost data. This
process heals them, and finishes a dead letter whose status-5 write failed.

Every `RECONCILE_INTERVAL_MS` it pages through the records in status 3 unchanged for
longer than `RECONCILE_GRACE_MS` (by id, on a partial index) and, one page per Redis
call, asks the job index `report:queue:jobs` (RecordId -> jobs alive, kept by the same
Lua steps that move jobs): a record with no entry gets a fresh job (RetryCount 0) in the
same atomic step; a record whose entry is the `dead` mark (dead-lettered, status not
set) is set to status 5 if it has not changed since it was read. The check per record
is O(1) and a page costs the same with a million records owed.

One instance works at a time under a lease (`report:queue:reconciler:lock`); others
stand by. Running several is still safe: the check-and-enqueue is atomic. The passes run on
the skeleton of every background loop (background/leased_loop.py: `loop_spec`).

    python -m reconciler        # the Procfile's `reconciler` line (reconciler/__main__.py)
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy.orm import Session, sessionmaker

from background.leased_loop import LoopSpec
from config.settings import Settings
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.event_spool import EventSpool
from redis_adapters.keyspace import RECONCILER_LOCK_KEY, RECONCILER_STATS_KEY, EventLogKeys
from redis_adapters.lock import RedisLock
from redis_adapters.queues import REPORT_JOBS_KEY, REPORT_QUEUE_KEY
from redis_adapters.report_queue import RedisReportQueue
from services.domain.events import Event, EventType, emit
from services.persistence.uow import UnitOfWork
from services.usecases import reconcile

logger = logging.getLogger("reconciler")

#: Smallest lease; the lease is at least three intervals so it never lapses between passes.
MIN_LOCK_TTL_MS = 30_000
#: While passes fail, the next waits a backoff doubling from 1 s up to this.
FAILED_MAX_PAUSE_S = 60.0

LOCK_KEY = RECONCILER_LOCK_KEY
#: Hash of the reconciler's figures: last pass time and counts, running totals.
STATS_KEY = RECONCILER_STATS_KEY
#: Who the reconciler's events name as their actor.
RECONCILER_ACTOR = "reconciler"


def lease_ms(settings: Settings) -> int:
    """The reconciler's lease: three intervals at least, so it never lapses between passes."""
    return max(MIN_LOCK_TTL_MS, 3 * settings.reconcile_interval_ms)


@dataclass
class PassReport:
    owner: bool = False
    scanned: int = 0
    enqueued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        client: redis.Redis,
        factory: sessionmaker[Session],
        settings: Settings | None = None,
        *,
        queue_key: str = REPORT_QUEUE_KEY,
        jobs_key: str = REPORT_JOBS_KEY,
        events_keys: EventLogKeys | None = None,
        events_spool: EventSpool | None = None,
    ) -> None:
        self.client = client
        self.factory = factory
        #: RECONCILE_INTERVAL_MS, RECONCILE_GRACE_MS, RECONCILE_BATCH, EVENT_LOG_QUEUE_MAX.
        self.settings = settings or Settings()
        self.queue = RedisReportQueue(client, key=queue_key, jobs_key=jobs_key)
        self.jobs_key = jobs_key
        self.lock = RedisLock(client, LOCK_KEY)
        self.events = RedisEventSink(
            client, events_keys, max_queue=self.settings.event_log_queue_max, spool=events_spool
        )

    def run_once(self) -> PassReport:
        """One pass over every record owed; raises on a Redis or database error (retried next pass)."""
        report = PassReport()
        ttl = lease_ms(self.settings)
        if not self.lock.ensure(ttl):
            return report
        report.owner = True
        after = 0
        while True:
            page = reconcile.records_owed(
                UnitOfWork(self.factory),
                grace_ms=self.settings.reconcile_grace_ms,
                after_id=after,
                limit=self.settings.reconcile_batch,
            )
            if not page:
                break
            report.scanned += len(page)
            enqueued, dead = self.queue.enqueue_missing([r.id for r in page])
            report.enqueued += enqueued
            if dead:
                report.failed += self._record_failures(page, dead)
            if enqueued:
                logger.warning(
                    "%d record(s) in status 3 had no report job; queued one each: %s",
                    len(enqueued),
                    _ids(enqueued),
                )
                self._log_events(EventType.REPORT_REQUEUED, enqueued, reason="no job alive in Redis")
            after = page[-1].id
            if len(page) < self.settings.reconcile_batch or not self.lock.renew(ttl):
                break
        self._record_stats(report)
        return report

    def _record_failures(self, page: Sequence[reconcile.OwedRecord], dead: Sequence[int]) -> list[int]:
        wanted = set(dead)
        changed = reconcile.mark_failed_unless_changed(
            UnitOfWork(self.factory), [r for r in page if r.id in wanted], actor=RECONCILER_ACTOR
        )
        if changed:
            self.queue.index.clear_dead_marks(changed)
            logger.warning(
                "%d dead-lettered record(s) had kept status 3 (the database was down); set to 5: %s",
                len(changed),
                _ids(changed),
            )
            # Their `report.failure_recorded` events committed with the change.
        return changed

    def _log_events(self, event_type: EventType, record_ids: Sequence[int], **data: object) -> None:
        emit(
            self.events,
            *[
                Event.new(event_type, record_id=rid, actor=RECONCILER_ACTOR, data=dict(data))
                for rid in record_ids
            ],
        )

    def _record_stats(self, report: PassReport) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            STATS_KEY,
            mapping={
                "last_pass_ms": int(time.time() * 1000),
                "last_scanned": report.scanned,
                "last_enqueued": len(report.enqueued),
                "last_failed": len(report.failed),
                "holder": self.lock.token,
            },
        )
        pipe.hincrby(STATS_KEY, "total_enqueued", len(report.enqueued))
        pipe.hincrby(STATS_KEY, "total_failed", len(report.failed))
        pipe.execute()

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError):  # the lease expires by itself
            self.lock.release()


def _ids(ids: Sequence[int], shown: int = 20) -> str:
    text = ", ".join(str(i) for i in ids[:shown])
    return text + (f" … (+{len(ids) - shown})" if len(ids) > shown else "")


def loop_spec(reconciler: Reconciler) -> LoopSpec[Settings]:
    """Pass after pass, every RECONCILE_INTERVAL_MS, under the reconciler's lease; a failed pass
    (Redis or the database down) is retried on the loop's backoff."""

    def reconcile(settings: Settings) -> bool:
        reconciler.run_once()
        return False

    return LoopSpec(
        "reconcile",
        reconcile,
        lambda s: s.reconcile_interval_ms,
        lease_ms,
        reconciler.lock,
        reconciler.close,
        doing="reconciling",
        what="reconciler pass",
        max_backoff_s=FAILED_MAX_PAUSE_S,
    )
