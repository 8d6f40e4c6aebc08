"""The admin side: the record list, regeneration of reports, soft delete (each audited when
given an audit log, see services/usecases/audit.py).

Regeneration resets a record in status 3 (生成中) or 5 (生成失败) to 3, clears its
results and summary, writes its `report.regenerated` event, commits, and only then queues
a job with RetryCount 0: a worker that takes the job at once must see the reset. Errors use
the .NET API's codes: missing or soft-deleted record 3241, wrong status 2005, empty id list 1001.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.domain.errors import (
    MSG_EMPTY_ID_LIST,
    MSG_REGENERATE_NOT_ALLOWED,
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
    ResetNotQueued,
    ServiceError,
)
from services.domain.events import Event, EventType
from services.domain.limits import MAX_ID, is_id, is_strict_int
from services.domain.opsmodel import REGENERATED, SKIPPED, AdminActor, AuditLog, ItemOutcome, QueueOperations
from services.domain.status import REGENERATABLE, RecordStatus, status_text
from services.domain.views import AdminRecordRow, BatchRegenerateResult, Page, RecordFilter
from services.persistence.uow import UnitOfWork
from services.usecases.audit import assume_utc, begin_action, skipped_detail, summarize
from services.usecases.change_events import log_change, note_not_enqueued
from services.usecases.ports import ReportQueue

logger = logging.getLogger(__name__)

MAX_PAGE_SIZE = 100
#: Statuses as plain ints, for SQL parameters.
_REGENERATABLE = sorted(int(s) for s in REGENERATABLE)


def list_records(
    uow: UnitOfWork, filters: RecordFilter, page: int = 1, page_size: int = 20
) -> Page[AdminRecordRow]:
    """One page of records matching `filters`, newest (highest id) first, with the total count.

    Soft-deleted records are left out unless ``filters.include_deleted``; the creation
    range is half-open (``created_from <= created_at < created_to``), naive times are UTC.
    """
    if not is_id(page) or not is_strict_int(page_size) or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ParamError(f"分页参数错误：page 从 1 开始，page_size 取 1 到 {MAX_PAGE_SIZE}")
    if (page - 1) * page_size > MAX_ID:
        raise ParamError("分页参数错误：page 过大")
    if filters.status is not None and filters.status not in {int(s) for s in RecordStatus}:
        raise ParamError(f"状态取值错误：{filters.status!r}")
    if filters.user_id is not None and not is_id(filters.user_id):
        raise ParamError("用户ID必须是正整数")
    created_from = assume_utc(filters.created_from)
    created_to = assume_utc(filters.created_to)
    if created_from and created_to and created_from > created_to:
        raise ParamError("开始时间不能晚于结束时间")

    with uow:
        conditions = uow.records.admin_conditions(
            status=filters.status,
            user_id=filters.user_id,
            include_deleted=filters.include_deleted,
            created_from=created_from,
            created_to=created_to,
        )
        records, total = uow.records.admin_page(conditions, (page - 1) * page_size, page_size)
        items = [
            AdminRecordRow(
                id=r.id,
                user_id=r.user_id,
                status=r.status,
                status_name=status_text(r.status),
                created_at=r.created_at,
                submitted_at=r.submitted_at,
                completed_at=r.completed_at,
                is_deleted=r.is_deleted,
            )
            for r in records
        ]
    return Page(items=items, total=total, page=page, page_size=page_size)


def regenerate_report(
    uow: UnitOfWork,
    queue: ReportQueue,
    record_id: int,
    *,
    actor: AdminActor | None = None,
    audit: AuditLog | None = None,
    dead_letters: QueueOperations | None = None,
) -> None:
    """Reset a record in status 3 or 5 to 3, clear its report, commit, then queue it.

    RecordNotFound (3241) for a missing or soft-deleted record, InvalidOperation (2005,
    "当前状态不允许重新生成") for any other status; both change nothing. If the queue
    refuses the job, the failure is logged and QueueUnavailable (5003) raised; the record
    then stays in 3 and may be regenerated again.

    With `dead_letters`, the job is queued through it: the record's dead letters are
    dropped in the same atomic step. With `audit`, the action (refusals included) is
    audited for `actor`; an audit log that cannot be written refuses the action first
    (DatabaseUnavailable).
    """
    trail = begin_action(audit, actor, "regenerate", [record_id])
    try:
        _regenerate_one(uow, queue, record_id, dead_letters, actor)
    except ServiceError as exc:
        trail.finish("failed", detail=f"{exc.code} {exc.message}")
        raise
    except Exception as exc:
        trail.finish("failed", detail=type(exc).__name__)
        raise
    trail.finish("ok")


def _regenerate_one(
    uow: UnitOfWork,
    queue: ReportQueue,
    record_id: int,
    dead_letters: QueueOperations | None,
    actor: AdminActor | None,
) -> None:
    if not is_id(record_id):
        raise RecordNotFound()
    with uow:
        status = uow.records.lock_live_status(record_id)
        if status is None:
            raise RecordNotFound()
        if status not in REGENERATABLE:
            raise InvalidOperation(MSG_REGENERATE_NOT_ALLOWED)
        reset_at = uow.records.reset_for_regeneration([record_id])
        events = log_change(
            uow,
            EventType.REPORT_REGENERATED,
            [record_id],
            at=reset_at,
            actor=actor.name if actor else None,
            data={"batch": False},
        )
        uow.commit()
    try:
        if dead_letters is None:
            queue.enqueue(record_id)
        else:
            _enqueue(queue, dead_letters, [record_id])
    except Exception as exc:
        logger.error("record %s was reset for regeneration but could not be queued", record_id, exc_info=True)
        note_not_enqueued(uow, events)
        raise ResetNotQueued() from exc
    logger.info("report of record %s queued for regeneration", record_id)


def _enqueue(queue: ReportQueue, dead_letters: QueueOperations | None, record_ids: Sequence[int]) -> None:
    if dead_letters is None:
        queue.enqueue_many(record_ids)
        return
    dropped = dead_letters.enqueue_reviving(record_ids)
    if dropped:
        logger.info("%d dead letter(s) of regenerated records dropped", dropped)


def batch_regenerate_report(
    uow: UnitOfWork, queue: ReportQueue, record_ids: Sequence[int]
) -> BatchRegenerateResult:
    """Regenerate every eligible record of `record_ids` (see `batch_regenerate`); the counts."""
    return batch_regenerate(uow, queue, record_ids).result


@dataclass(frozen=True)
class BatchOutcome:
    #: The counts and the outcome of each requested id.
    result: BatchRegenerateResult
    #: The records reset and queued, in request order.
    queued: tuple[int, ...]

    @property
    def items(self) -> list[ItemOutcome]:
        return list(self.result.items)


_NOT_FOUND = (RecordNotFound.code, RecordNotFound.default_message)
_DUPLICATE = (ParamError.code, "重复的记录ID，已按第一次出现处理")
_QUEUE_DOWN = (QueueUnavailable.code, QueueUnavailable.default_message)


@dataclass(frozen=True)
class Reset:
    #: Every live record's status before the reset (missing and soft-deleted ones left out).
    statuses: dict[int, int]
    #: The `report.regenerated` events committed with the reset, one per record reset.
    events: tuple[Event, ...] = ()


def reset_records(
    uow: UnitOfWork, record_ids: list[int], *, actor: str | None, data: Mapping[str, Any]
) -> Reset:
    """Reset the records in status 3/5 among `record_ids` to 3, each with its `report.regenerated`
    event (`actor`, `data`) in the same transaction (committed)."""
    if not record_ids:
        return Reset({})
    with uow:
        statuses = uow.records.lock_live_statuses(record_ids)
        resettable = [i for i in record_ids if statuses.get(i) in REGENERATABLE]
        if not resettable:
            return Reset(statuses)
        reset_at = uow.records.reset_for_regeneration(resettable)
        events = log_change(
            uow, EventType.REPORT_REGENERATED, resettable, at=reset_at, actor=actor, data=data
        )
        uow.commit()
    return Reset(statuses, tuple(events))


def batch_regenerate(
    uow: UnitOfWork,
    queue: ReportQueue,
    record_ids: Sequence[int],
    *,
    actor: AdminActor | None = None,
    audit: AuditLog | None = None,
    dead_letters: QueueOperations | None = None,
    logged_as: str | None = None,
    event_data: Mapping[str, Any] | None = None,
) -> BatchOutcome:
    """Regenerate every eligible record of `record_ids`; the others are skipped, each with why.

    ``success_count + skipped_count == len(record_ids)`` always, and ``result.items`` has
    one `ItemOutcome` per requested id in request order: "regenerated", or "skipped" with
    the code and reason: 3241 missing or soft-deleted (or an id outside BIGINT), 2005 not
    in status 3 or 5, 1001 a repeat (an id given several times is reset and queued once),
    5003 the queue refused the jobs. An empty list is ParamError (1001, "记录ID列表不能为空");
    an element that is not an int is ParamError too.

    Set-based, so a thousand ids cost the same few statements as one: one
    ``SELECT ... FOR UPDATE`` with ``id = ANY(:ids)`` (locking in id order, so concurrent
    batches cannot deadlock), one UPDATE, one DELETE per result table, a COMMIT, then one
    queue call (through `dead_letters`, which also drops the records' dead letters, when
    given). If that call fails it is logged and all those ids count as skipped (5003);
    their records stay in 3 and may be regenerated again. `actor`/`audit` as for
    `regenerate_report`. Each record reset has its `report.regenerated` event committed with
    the reset, its actor `logged_as` (default: the actor's name), its data ``batch: true``,
    the number requested and `event_data`; ``enqueued: false`` is added when the queue refused.
    """
    if not record_ids:
        raise ParamError(MSG_EMPTY_ID_LIST)
    if any(not is_strict_int(i) for i in record_ids):
        raise ParamError("记录ID必须是整数")
    trail = begin_action(audit, actor, "batch_regenerate", list(record_ids))
    # First occurrences in request order; ids outside BIGINT cannot exist, skip them here.
    candidates = list(dict.fromkeys(i for i in record_ids if is_id(i)))
    reset = reset_records(
        uow,
        candidates,
        actor=logged_as or (actor.name if actor else None),
        data={"batch": True, "requested": len(record_ids), **(event_data or {})},
    )
    statuses = reset.statuses
    eligible = [i for i in candidates if statuses.get(i) in REGENERATABLE]
    queued = False
    if eligible:
        try:
            _enqueue(queue, dead_letters, eligible)
            queued = True
        except Exception:
            logger.error(
                "%d records were reset for regeneration but could not be queued: %s",
                len(eligible),
                eligible[:20],
                exc_info=True,
            )
            note_not_enqueued(uow, reset.events)
    items = _batch_items(record_ids, statuses, set(eligible), queued)
    done = tuple(eligible) if queued else ()
    result = BatchRegenerateResult(
        success_count=len(done), skipped_count=len(record_ids) - len(done), items=tuple(items)
    )
    logger.info("%d of %d records queued for regeneration", len(done), len(record_ids))
    trail.finish(
        summarize(items, REGENERATED),
        detail=f"{result.success_count} regenerated, {result.skipped_count} skipped"
        + (f"; {detail}" if (detail := skipped_detail(items)) else ""),
    )
    return BatchOutcome(result, done)


def _batch_items(
    record_ids: Sequence[int], statuses: dict[int, int], eligible: set[int], queued: bool
) -> list[ItemOutcome]:
    items: list[ItemOutcome] = []
    seen: set[int] = set()
    for record_id in record_ids:
        code: int | None
        reason: str | None
        if record_id in seen:
            code, reason = _DUPLICATE
        elif record_id in eligible:
            code, reason = (None, None) if queued else _QUEUE_DOWN
        elif record_id in statuses:
            code = InvalidOperation.code
            reason = f"{MSG_REGENERATE_NOT_ALLOWED}（{status_text(statuses[record_id])}）"
        else:
            code, reason = _NOT_FOUND
        seen.add(record_id)
        outcome = REGENERATED if code is None else SKIPPED
        items.append(ItemOutcome(id=record_id, outcome=outcome, code=code, reason=reason))
    return items


def soft_delete_record(
    uow: UnitOfWork, record_id: int, *, actor: AdminActor | None = None, audit: AuditLog | None = None
) -> None:
    """Mark a record deleted (it keeps its rows), with its `record.deleted` event (by `actor`);
    RecordNotFound if missing or already deleted.

    With `audit`, audited for `actor` (refusals too); refused first if the audit log is down.
    """
    trail = begin_action(audit, actor, "delete_record", [record_id])
    try:
        _soft_delete(uow, record_id, actor)
    except ServiceError as exc:
        trail.finish("failed", detail=f"{exc.code} {exc.message}")
        raise
    trail.finish("ok")


def _soft_delete(uow: UnitOfWork, record_id: int, actor: AdminActor | None) -> None:
    if not is_id(record_id):
        raise RecordNotFound()
    with uow:
        deleted_at = uow.records.soft_delete(record_id)
        if deleted_at is None:
            raise RecordNotFound()
        log_change(
            uow, EventType.RECORD_DELETED, [record_id], at=deleted_at, actor=actor.name if actor else None
        )
        uow.commit()
