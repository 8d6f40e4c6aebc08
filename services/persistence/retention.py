"""Data retention: event-log months past retention dropped, soft-deleted records' data purged.

- `drop_expired_partitions`: the month partitions of `event_log` (services/persistence/partitions.py)
  that end on or before the cut-off are detached and dropped, whole (no row-by-row
  delete, no bloat); rows older than the cut-off in the default partition are deleted.
  A partition is dropped only once all of its month is past retention, so an event is
  kept at least `retention_days` and at most about a month longer.
- `purge_deleted_records`: the answers, dimension results and report summary of records
  soft-deleted (an admin's delete) longer than `after_days` ago are deleted; the
  record row stays, so the admin list (``includeDeleted``) still shows it. The time of
  the deletion is the record's `updated_at` (the soft delete is its last change).

Both run in the caller's transaction, under the partition lock for the first (creation
and dropping never interleave); the hotpath process runs them under its retention
lease (hotpath/retention_loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from services.persistence.models import Answer, AssessmentRecord, DimensionResult, ReportSummary
from services.persistence.partitions import (
    DEFAULT_PARTITION,
    PARENT_TABLE,
    PARTITION_LOCK_KEY,
    add_months,
    existing_months,
    partition_name,
)


@dataclass(frozen=True)
class PurgeReport:
    records: int
    answers: int
    results: int
    summaries: int


def cutoff(now: datetime, days: int) -> datetime:
    return now.astimezone(UTC) - timedelta(days=days)


def drop_expired_partitions(session: Session, older_than: datetime) -> tuple[list[str], int]:
    """Detach and drop every month partition wholly before `older_than`; delete older default rows.

    Returns the partitions dropped and the rows deleted from the default partition.
    """
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PARTITION_LOCK_KEY})
    limit = older_than.astimezone(UTC)
    dropped: list[str] = []
    for month in sorted(existing_months(session)):
        end = add_months(month, 1)
        if datetime(end.year, end.month, end.day, tzinfo=UTC) > limit:
            continue
        name = partition_name(month)  # built from a date's digits only (DDL takes no parameters)
        session.execute(text(f"ALTER TABLE {PARENT_TABLE} DETACH PARTITION {name}"))
        session.execute(text(f"DROP TABLE {name}"))
        dropped.append(name)
    result = session.execute(
        text(f"DELETE FROM {DEFAULT_PARTITION} WHERE occurred_at < :limit"),  # noqa: S608
        {"limit": limit},
    )
    return dropped, int(getattr(result, "rowcount", 0) or 0)


def purge_deleted_records(session: Session, deleted_before: datetime, *, limit: int) -> PurgeReport:
    """Delete the answers and report of up to `limit` records soft-deleted before `deleted_before`."""
    has_data = (
        select(Answer.record_id).where(Answer.record_id == AssessmentRecord.id).exists()
        | select(DimensionResult.record_id).where(DimensionResult.record_id == AssessmentRecord.id).exists()
        | select(ReportSummary.record_id).where(ReportSummary.record_id == AssessmentRecord.id).exists()
    )
    ids = list(
        session.scalars(
            select(AssessmentRecord.id)
            .where(AssessmentRecord.is_deleted, AssessmentRecord.updated_at < deleted_before, has_data)
            .order_by(AssessmentRecord.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    if not ids:
        return PurgeReport(0, 0, 0, 0)
    counts = [
        int(getattr(session.execute(delete(table).where(table.record_id.in_(ids))), "rowcount", 0) or 0)
        for table in (Answer, DimensionResult, ReportSummary)
    ]
    return PurgeReport(len(ids), *counts)
