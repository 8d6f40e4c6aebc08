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
stand by. Running several is still safe: the check-and-enqueue is atomic.

    python -m reconciler        # the Procfile's `reconciler` line (reconciler/__main__.py)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis
from listbroker import Backoff
from sqlalchemy.orm import Session, sessionmaker

from config.settings import (
    DEFAULT_EVENT_LOG_QUEUE_MAX,
    DEFAULT_RECONCILE_BATCH,
    DEFAULT_RECONCILE_GRACE_MS,
    DEFAULT_RECONCILE_INTERVAL_MS,
    Settings,
)
from observability.heartbeat import Activity
from observability.logs import outage
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

#: Pause between two passes.
DEFAULT_INTERVAL_MS = DEFAULT_RECONCILE_INTERVAL_MS
#: A record must have been in status 3, unchanged, this long before it counts as lost:
#: longer than any submission takes from its commit to its LPUSH.
DEFAULT_GRACE_MS = DEFAULT_RECONCILE_GRACE_MS
#: Records per page (one SQL query and one Redis call each).
DEFAULT_BATCH = DEFAULT_RECONCILE_BATCH
#: Smallest lease; the lease is at least three intervals so it never lapses between passes.
MIN_LOCK_TTL_MS = 30_000
#: While passes fail, the next waits the interval or this backoff if longer (doubling from
#: the first value up to the second): a long outage costs a pass a minute at most.
FAILED_FIRST_PAUSE_S = 1.0
FAILED_MAX_PAUSE_S = 60.0

LOCK_KEY = RECONCILER_LOCK_KEY
#: Hash of the reconciler's figures: last pass time and counts, running totals.
STATS_KEY = RECONCILER_STATS_KEY
#: Who the reconciler's events name as their actor.
RECONCILER_ACTOR = "reconciler"


@dataclass(frozen=True)
class ReconcilerSettings:
    interval_ms: int = DEFAULT_INTERVAL_MS
    grace_ms: int = DEFAULT_GRACE_MS
    batch: int = DEFAULT_BATCH

    @property
    def lock_ttl_ms(self) -> int:
        return max(MIN_LOCK_TTL_MS, 3 * self.interval_ms)

    @classmethod
    def of(cls, settings: Settings) -> ReconcilerSettings:
        return cls(
            interval_ms=settings.reconcile_interval_ms,
            grace_ms=settings.reconcile_grace_ms,
            batch=settings.reconcile_batch,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReconcilerSettings:
        """The settings of `env` (this process's environment by default: config/settings.py)."""
        return cls.of(Settings.from_env(env))


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
        settings: ReconcilerSettings | None = None,
        *,
        queue_key: str = REPORT_QUEUE_KEY,
        jobs_key: str = REPORT_JOBS_KEY,
        events_keys: EventLogKeys | None = None,
        events_queue_max: int = DEFAULT_EVENT_LOG_QUEUE_MAX,
        events_spool: EventSpool | None = None,
    ) -> None:
        self.client = client
        self.factory = factory
        self.settings = settings or ReconcilerSettings()
        self.queue = RedisReportQueue(client, key=queue_key, jobs_key=jobs_key)
        self.jobs_key = jobs_key
        self.lock = RedisLock(client, LOCK_KEY)
        self.events = RedisEventSink(client, events_keys, max_queue=events_queue_max, spool=events_spool)

    def run_once(self) -> PassReport:
        """One pass over every record owed; raises on a Redis or database error (retried next pass)."""
        report = PassReport()
        ttl = self.settings.lock_ttl_ms
        if not self.lock.ensure(ttl):
            return report
        report.owner = True
        after = 0
        while True:
            page = reconcile.records_owed(
                UnitOfWork(self.factory),
                grace_ms=self.settings.grace_ms,
                after_id=after,
                limit=self.settings.batch,
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
            if len(page) < self.settings.batch or not self.lock.renew(ttl):
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


def run(reconciler: Reconciler, stop: threading.Event, activity: Activity | None = None) -> None:
    """Pass after pass until `stop`; a failed pass is retried after the interval, or after a
    growing backoff while passes keep failing (logged once, summarised, ended: backoff.py)."""
    backoff = Backoff("reconciler pass", logger, first_s=FAILED_FIRST_PAUSE_S, max_s=FAILED_MAX_PAUSE_S)
    while not stop.is_set():
        token = activity.begin("reconciling") if activity is not None else None
        try:
            reconciler.run_once()
            backoff.succeeded()
        except Exception as exc:
            backoff.failed(exc, traceback=not outage(exc))
        finally:
            if activity is not None and token is not None:
                activity.end(token)
        stop.wait(max(reconciler.settings.interval_ms / 1000, backoff.delay))
    reconciler.close()
