"""What the reconciler asks of the database: the records that are owed a report.

A record in status 3 (生成中) must have a report job somewhere in Redis. These queries
find the candidates (status 3, not deleted, unchanged for longer than a grace period,
so a submission between its commit and its LPUSH is not taken for lost) in pages by
id, and complete the status of records whose last job was dead-lettered while the
database was unreachable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from services.domain.events import EventType
from services.persistence.uow import UnitOfWork
from services.usecases.change_events import log_change


@dataclass(frozen=True)
class OwedRecord:
    id: int
    #: The row's updated_at as read: a later change (e.g. a regeneration) makes it stale.
    updated_at: datetime


def records_owed(uow: UnitOfWork, *, grace_ms: int, after_id: int, limit: int) -> list[OwedRecord]:
    """Records in status 3, not deleted, unchanged for `grace_ms`, with id > `after_id`, by id.

    Served by the partial index `ix_assessment_records_generating` (id WHERE status = 3
    AND NOT is_deleted): a page costs the same with ten or a million records owed.
    """
    with uow:
        rows = uow.records.owed(grace_ms=grace_ms, after_id=after_id, limit=limit)
    return [OwedRecord(record_id, updated_at) for record_id, updated_at in rows]


def mark_failed_unless_changed(
    uow: UnitOfWork, records: Sequence[OwedRecord], *, actor: str | None = None
) -> list[int]:
    """Set these records from 3 to 5 if each is still as read; the ids changed, each with its
    `report.failure_recorded` event (``statusSet: true``) committed with the change.

    For jobs dead-lettered while the database was down: the worker could not set
    status 5 then. A record changed since it was read (an admin regenerated it) is left.
    """
    if not records:
        return []
    with uow:
        changed = sorted(
            uow.records.fail_unless_changed([r.id for r in records], [r.updated_at for r in records])
        )
        log_change(
            uow,
            EventType.REPORT_FAILURE_RECORDED,
            changed,
            at=datetime.now(UTC),
            actor=actor,
            data={"statusSet": True},
        )
        uow.commit()
    return changed
