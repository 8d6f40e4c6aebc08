"""The retention loop of the hot-path process: keeps PostgreSQL and Redis from growing for ever.

Each cycle, under its own lease (`hotpath:retention:lock`: one process of the fleet does
the work, a standby takes over when it dies), it

- detaches and drops the event-log partitions past EVENT_LOG_RETENTION_DAYS (180), and
  deletes default-partition rows that old (services/persistence/retention.py);
- deletes the answers and report of records soft-deleted more than
  DELETED_RECORD_PURGE_DAYS (30) ago, in transactions of `PURGE_BATCH` records;
- trims the lists of set-aside entries (`hotpath:answers:invalid`,
  `hotpath:progress:invalid`, `eventlog:invalid`), which only bad input fills and
  nothing else empties, to their newest INVALID_KEEP (100,000) entries, logging what
  it drops.

Dropping is safe without a fence: it is idempotent and serialised with partition
creation by PostgreSQL's advisory lock, so a stale owner's cycle can only repeat work.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from redis_adapters.keyspace import RETENTION_LOCK_KEY, Keyspace
from redis_adapters.lock import RedisLock
from services.persistence import retention

logger = logging.getLogger(__name__)

#: Records purged per transaction.
PURGE_BATCH = 500


def invalid_lists(keyspace: Keyspace | None = None) -> tuple[str, ...]:
    keyspace = keyspace or Keyspace.of()
    autosave = keyspace.autosave
    return (autosave.answers.invalid, autosave.progress.invalid, keyspace.eventlog.invalid)


@dataclass
class RetentionReport:
    owner: bool = False
    dropped: list[str] = field(default_factory=list)
    default_rows: int = 0
    purged_records: int = 0
    trimmed: dict[str, int] = field(default_factory=dict)


class RetentionJob:
    def __init__(
        self,
        client: redis.Redis,
        factory: sessionmaker[Session],
        settings: Settings | None = None,
        *,
        lock_key: str = RETENTION_LOCK_KEY,
        invalid_keys: tuple[str, ...] | None = None,
    ) -> None:
        self.client = client
        self.factory = factory
        self.settings = settings or Settings()
        self.lock = RedisLock(client, lock_key)
        self.invalid_keys = invalid_lists() if invalid_keys is None else invalid_keys

    def run_once(self, *, lock_ttl_ms: int, now: datetime | None = None) -> RetentionReport:
        report = RetentionReport()
        if not self.lock.ensure(lock_ttl_ms):
            return report
        report.owner = True
        now = now or datetime.now(UTC)
        with self.lock.kept_alive(lock_ttl_ms):
            with self.factory() as session, session.begin():
                report.dropped, report.default_rows = retention.drop_expired_partitions(
                    session, retention.cutoff(now, self.settings.event_log_retention_days)
                )
            if report.dropped or report.default_rows:
                logger.info(
                    "event log: dropped %s and %d default-partition row(s), older than %d days",
                    ", ".join(report.dropped) or "no partition",
                    report.default_rows,
                    self.settings.event_log_retention_days,
                )
            deleted_before = retention.cutoff(now, self.settings.deleted_record_purge_days)
            while self.lock.held:
                with self.factory() as session, session.begin():
                    purged = retention.purge_deleted_records(session, deleted_before, limit=PURGE_BATCH)
                report.purged_records += purged.records
                if purged.records:
                    logger.info(
                        "purged the data of %d record(s) deleted over %d days ago:"
                        " %d answers, %d results, %d summaries",
                        purged.records,
                        self.settings.deleted_record_purge_days,
                        purged.answers,
                        purged.results,
                        purged.summaries,
                    )
                if purged.records < PURGE_BATCH:
                    break
            report.trimmed = self._trim_invalid()
        return report

    def _trim_invalid(self) -> dict[str, int]:
        """Trim each list of set-aside entries (LPUSHed: the oldest are at the tail).

        One transaction per list (its length and the trim together, so the count logged is
        what was dropped): the lists are of different families, on different slots of a
        Redis Cluster, and a transaction must stay on one slot.
        """
        keep = self.settings.hotpath_invalid_keep
        trimmed = {}
        for key in self.invalid_keys:
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(key)
            pipe.ltrim(key, 0, keep - 1)
            length, _ = pipe.execute()
            if int(length) > keep:
                trimmed[key] = int(length) - keep
                logger.warning(
                    "%s: dropped its %d oldest entries (keeps the newest %d)", key, trimmed[key], keep
                )
        return trimmed

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError):  # the lease expires by itself
            self.lock.release()
