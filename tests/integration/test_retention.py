"""The retention loop on the real PostgreSQL and Redis: expired partitions dropped under the lease,
soft-deleted records' data purged, the set-aside lists trimmed."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import redis
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from hotpath.retention_loop import RetentionJob
from services.domain.status import RecordStatus
from services.persistence.models import Answer, AssessmentRecord, DimensionResult, ReportSummary
from services.persistence.partitions import (
    DEFAULT_PARTITION,
    add_months,
    create_month_partition,
    existing_months,
    month_of,
    partition_name,
)

NOW = datetime.now(UTC)
TTL_MS = 10_000
LOCK_KEY = "test:retention:lock"
INVALID_KEY = "test:retention:invalid"


def job(
    client: redis.Redis, factory: sessionmaker[Session], settings: Settings | None = None
) -> RetentionJob:
    return RetentionJob(client, factory, settings, lock_key=LOCK_KEY, invalid_keys=(INVALID_KEY,))


def insert_event(engine: Engine, moment: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO event_log (id, occurred_at, event_type, actor, data)"
                " VALUES (:id, :at, 'test', 'test', '{}'::jsonb)"
            ),
            {"id": str(uuid.uuid4()), "at": moment},
        )


def rows_by_partition(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT tableoid::regclass::text, count(*) FROM event_log GROUP BY 1"))
        return {str(name): int(count) for name, count in rows}


def test_partitions_past_retention_are_dropped_newer_kept_under_the_lease(
    event_log: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    current = month_of(NOW)
    months = {k: add_months(current, -k) for k in (8, 7, 6, 5, 1)}
    with session_factory() as session, session.begin():
        for month in months.values():
            create_month_partition(session, month)
    for month in months.values():
        insert_event(event_log, datetime(month.year, month.month, 15, tzinfo=UTC))
    insert_event(event_log, NOW - timedelta(days=3 * 365))  # beyond the partitioned range: the default
    insert_event(event_log, NOW)
    cutoff = NOW - timedelta(days=180)

    standby = job(redis_client, session_factory, Settings(event_log_retention_days=180))
    owner = job(redis_client, session_factory, Settings(event_log_retention_days=180))
    assert owner.lock.ensure(TTL_MS)
    assert standby.run_once(lock_ttl_ms=TTL_MS, now=NOW).owner is False  # the lease is taken
    assert all(month in existing_months(session_factory()) for month in months.values())

    report = owner.run_once(lock_ttl_ms=TTL_MS, now=NOW)

    expired = {
        partition_name(m)
        for m in months.values()
        if datetime(*add_months(m, 1).timetuple()[:3], tzinfo=UTC) <= cutoff
    }
    assert expired
    assert expired < {partition_name(m) for m in months.values()}
    assert set(report.dropped) == expired
    assert report.default_rows == 1
    with session_factory() as session:
        left = existing_months(session)
    assert {partition_name(m) for m in left}.isdisjoint(expired)
    assert {partition_name(m) for m in months.values()} - expired <= {partition_name(m) for m in left}
    with event_log.connect() as conn:
        tables = set(conn.scalars(text("SELECT tablename FROM pg_tables WHERE tablename LIKE 'event_log_%'")))
    assert tables.isdisjoint(expired)  # dropped, not only detached
    by_partition = rows_by_partition(event_log)
    assert DEFAULT_PARTITION not in by_partition
    assert sum(by_partition.values()) == len(months) - len(expired) + 1  # the newer months and now
    # Idempotent: a second cycle (or a stale owner's) finds nothing left to drop.
    assert owner.run_once(lock_ttl_ms=TTL_MS, now=NOW).dropped == []
    owner.close()


def _counts(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int, int]:
    with session_factory() as session:
        return tuple(  # type: ignore[return-value]
            int(session.scalar(select(func.count()).select_from(t).where(t.record_id == record_id)) or 0)
            for t in (Answer, DimensionResult, ReportSummary)
        )


def test_data_of_records_deleted_long_ago_is_purged(
    make_record: Callable[..., int], session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    old_deleted, new_deleted, old_live = (make_record(RecordStatus.COMPLETED) for _ in range(3))
    with session_factory() as session, session.begin():
        for record_id, deleted, age in (
            (old_deleted, True, 40),
            (new_deleted, True, 1),
            (old_live, False, 400),
        ):
            session.execute(
                update(AssessmentRecord)
                .where(AssessmentRecord.id == record_id)
                .values(is_deleted=deleted, updated_at=NOW - timedelta(days=age))
            )
    full = _counts(session_factory, old_live)
    assert full[0] > 0
    assert full[1] > 0
    assert full[2] == 1

    report = job(redis_client, session_factory, Settings(deleted_record_purge_days=30)).run_once(
        lock_ttl_ms=TTL_MS, now=NOW
    )

    assert report.purged_records == 1
    assert _counts(session_factory, old_deleted) == (0, 0, 0)
    assert _counts(session_factory, new_deleted) == full
    assert _counts(session_factory, old_live) == full
    with session_factory() as session:  # the record itself stays, for the admin list
        assert session.get(AssessmentRecord, old_deleted) is not None


def test_set_aside_lists_keep_their_newest_entries(
    session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    for n in range(5):
        redis_client.lpush(INVALID_KEY, f"entry-{n}")
    report = job(redis_client, session_factory, Settings(hotpath_invalid_keep=3)).run_once(
        lock_ttl_ms=TTL_MS, now=NOW
    )
    assert report.trimmed == {INVALID_KEY: 2}
    assert redis_client.lrange(INVALID_KEY, 0, -1) == [b"entry-4", b"entry-3", b"entry-2"]
