"""Operations on the report queue for admins: dead letters, quarantined payloads, the audit trail.

One service function per operation, shared by the JSON admin API (web/admin_api.py),
the CLI (web/cli.py) and the browser console. Redis is reached through the
`QueueOperations` port (redis_adapters/queue_ops.py), the audit through `AuditLog`
(services/usecases/audit.py, PostgreSQL). Every action is audited: its entry is written before
anything is done, and when it cannot be the action is refused (DatabaseUnavailable ->
503); its outcome completes it.

Requeueing a dead letter resets its record to status 3 (生成中) first (committed), then
removes the entry and queues a fresh job (RetryCount 0) in one atomic Redis step. If
that step fails, the record stays in 3 with its dead letter kept; a later requeue or the
reconciler finishes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from services.domain.errors import (
    DatabaseUnavailable,
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
)
from services.domain.events import EventType
from services.domain.limits import is_id
from services.domain.opsmodel import (
    DELETED,
    REQUEUED,
    RETRIED,
    SKIPPED,
    AdminActor,
    AuditEntry,
    AuditLog,
    DeadLetter,
    DelayedRetry,
    InvalidPayload,
    ItemOutcome,
    Page,
    QueueOperations,
)
from services.domain.status import REGENERATABLE, status_text
from services.persistence.event_store import last_errors
from services.persistence.uow import UnitOfWork
from services.usecases.admin import reset_records  # the same reset as a regeneration
from services.usecases.audit import begin_action, list_audit, summarize
from services.usecases.change_events import note_not_enqueued
from services.usecases.reports import mark_generation_failed

__all__ = [
    "AdminActor",
    "AuditEntry",
    "AuditLog",
    "DeadLetter",
    "DelayedRetry",
    "InvalidPayload",
    "ItemOutcome",
    "Page",
    "QueueOperations",
    "delayed_retries_of",
    "delete_dead_letters",
    "delete_delayed_retries",
    "delete_invalid",
    "list_audit",
    "list_dead_letters",
    "list_delayed_retries",
    "list_invalid",
    "purge_invalid",
    "requeue_dead_letters",
    "retry_delayed_now",
]

MAX_PAGE_SIZE = 200
#: Handles accepted in one call.
MAX_IDS = 1000

#: A handle as the queue adapters make them (a hex digest, ".2" for a repeat), with room to spare.
_HANDLE = re.compile(r"[0-9A-Za-z._-]{1,64}")
_GONE = (RecordNotFound.code, "死信不存在（已被处理或删除）")
_GONE_INVALID = (RecordNotFound.code, "无效消息不存在（已被删除）")
_GONE_DELAYED = (RecordNotFound.code, "重试不在延迟队列中（已到期执行或已被删除）")
_UNREADABLE = (ParamError.code, "死信中没有可用的记录ID")
_QUEUE_DOWN = (QueueUnavailable.code, QueueUnavailable.default_message)


def _page_args(offset: int, limit: int) -> None:
    if offset < 0 or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ParamError(f"分页参数错误：offset 不小于 0，limit 取 1 到 {MAX_PAGE_SIZE}")


def _handles(values: Sequence[str], name: str) -> list[str]:
    if not values:
        raise ParamError(f"{name}列表不能为空")
    if len(values) > MAX_IDS or any(not isinstance(v, str) or not _HANDLE.fullmatch(v) for v in values):
        raise ParamError(f"{name}必须是 1 到 {MAX_IDS} 个由字母、数字、点、下划线或连字符组成的字符串")
    return list(dict.fromkeys(values))


def list_dead_letters(queue: QueueOperations, *, offset: int = 0, limit: int = 50) -> Page[DeadLetter]:
    """One page of `report:queue:dead`, newest first."""
    _page_args(offset, limit)
    total, items = queue.dead_letters(offset, limit)
    return Page(items=items, total=total, offset=offset, limit=limit)


def requeue_dead_letters(
    uow: UnitOfWork,
    queue: QueueOperations,
    audit: AuditLog,
    actor: AdminActor,
    message_ids: Sequence[str] | None,
) -> list[ItemOutcome]:
    """Requeue the dead letters named (None: all of them); one outcome per dead letter.

    Skipped: a handle no longer in the list (3241), a letter whose record is missing or
    soft-deleted (3241) or in a status other than 3/5 (2005, e.g. already regenerated:
    delete the letter instead), a letter with no readable RecordId (1001), and all of
    them when Redis refuses the step (5003).
    """
    wanted = None if message_ids is None else _handles(message_ids, "死信ID")
    trail = begin_action(audit, actor, "requeue", wanted or [], detail="all" if wanted is None else None)
    letters = {letter.message_id: letter for letter in queue.all_dead_letters()}
    order = list(letters) if wanted is None else wanted
    outcomes: dict[str, ItemOutcome] = {}
    targets: dict[str, int] = {}
    for message_id in order:
        letter = letters.get(message_id)
        if letter is None:
            outcomes[message_id] = _skip(message_id, _GONE)
        elif letter.record_id is None:
            outcomes[message_id] = _skip(message_id, _UNREADABLE)
        else:
            targets[message_id] = letter.record_id
    reset = reset_records(
        uow, sorted(set(targets.values())), actor=actor.name, data={"batch": True, "deadLetter": True}
    )
    statuses = reset.statuses
    ready: list[str] = []
    for message_id, record_id in targets.items():
        status = statuses.get(record_id)
        if status is None:
            outcomes[message_id] = _skip(message_id, (RecordNotFound.code, RecordNotFound.default_message))
        elif status not in REGENERATABLE:
            reason = f"当前状态不允许重新入队（{status_text(status)}），可删除该死信"
            outcomes[message_id] = _skip(message_id, (InvalidOperation.code, reason))
        else:
            ready.append(message_id)
    requeued = _requeue(queue, ready)
    outcomes.update(requeued)
    refused = {targets[m] for m, item in requeued.items() if item.code == QueueUnavailable.code}
    note_not_enqueued(uow, [e for e in reset.events if e.record_id in refused])
    items = [outcomes[m] for m in order]
    trail.finish(
        summarize(items, REQUEUED),
        ids=list(order),
        detail=("all; " if wanted is None else "") + _counts(items, REQUEUED),
    )
    return items


def _requeue(queue: QueueOperations, ready: list[str]) -> dict[str, ItemOutcome]:
    if not ready:
        return {}
    try:
        done = queue.requeue_dead(ready)
    except QueueUnavailable:
        return {m: _skip(m, _QUEUE_DOWN) for m in ready}
    return {m: ItemOutcome(id=m, outcome=REQUEUED) if done.get(m) else _skip(m, _GONE) for m in ready}


def delete_dead_letters(
    queue: QueueOperations, audit: AuditLog, actor: AdminActor, message_ids: Sequence[str]
) -> list[ItemOutcome]:
    """Delete the dead letters named; their records keep their status."""
    return _delete(
        audit, actor, "delete_dead", _handles(message_ids, "死信ID"), delete=queue.delete_dead, gone=_GONE
    )


def list_invalid(queue: QueueOperations, *, offset: int = 0, limit: int = 50) -> Page[InvalidPayload]:
    """One page of `report:queue:invalid` (payloads that could not be decoded), newest first."""
    _page_args(offset, limit)
    total, items = queue.invalid_payloads(offset, limit)
    return Page(items=items, total=total, offset=offset, limit=limit)


def delete_invalid(
    queue: QueueOperations, audit: AuditLog, actor: AdminActor, keys: Sequence[str]
) -> list[ItemOutcome]:
    return _delete(
        audit,
        actor,
        "delete_invalid",
        _handles(keys, "无效消息ID"),
        delete=queue.delete_invalid,
        gone=_GONE_INVALID,
    )


def _delete(
    audit: AuditLog,
    actor: AdminActor,
    action: str,
    wanted: list[str],
    *,
    delete: Callable[[list[str]], Mapping[str, bool]],
    gone: tuple[int, str],
) -> list[ItemOutcome]:
    """Delete `wanted` from a list with `delete`, audited: the audit must be writable first,
    a queue that is down is audited as a failure and raised, each handle gets its outcome."""
    trail = begin_action(audit, actor, action, wanted)
    try:
        done = delete(wanted)
    except QueueUnavailable:
        trail.finish("failed", detail="queue unavailable")
        raise
    items = [ItemOutcome(id=h, outcome=DELETED) if done.get(h) else _skip(h, gone) for h in wanted]
    trail.finish(summarize(items, DELETED), detail=_counts(items, DELETED))
    return items


def purge_invalid(queue: QueueOperations, audit: AuditLog, actor: AdminActor) -> int:
    """Drop every quarantined payload; how many there were."""
    trail = begin_action(audit, actor, "purge_invalid", [])
    try:
        count = queue.purge_invalid()
    except QueueUnavailable:
        trail.finish("failed", detail="queue unavailable")
        raise
    trail.finish("ok", detail=f"{count} purged")
    return count


def list_delayed_retries(
    uow: UnitOfWork | None, queue: QueueOperations, *, offset: int = 0, limit: int = 50
) -> Page[DelayedRetry]:
    """One page of the report queue's delayed retries, soonest due first, each with its
    record's last error from the event log (without `uow`, or while the database is down:
    without it; the page still shows)."""
    _page_args(offset, limit)
    total, items = queue.delayed_retries(offset, limit)
    errors: dict[int, str] = {}
    if uow is not None:
        try:
            errors = last_errors(uow, [i.record_id for i in items if i.record_id is not None])
        except DatabaseUnavailable:
            errors = {}
    items = [replace(i, last_error=errors.get(i.record_id)) if i.record_id in errors else i for i in items]
    return Page(items=items, total=total, offset=offset, limit=limit)


def delayed_retries_of(queue: QueueOperations, record_id: int) -> list[DelayedRetry]:
    """The retries of one record waiting for their due time, soonest first (a record has one,
    or two while an admin's regeneration runs beside a retry)."""
    if not is_id(record_id):
        raise ParamError("记录ID必须是正整数")
    return queue.delayed_retries_of(record_id)


def retry_delayed_now(
    queue: QueueOperations, audit: AuditLog, actor: AdminActor, message_ids: Sequence[str] | None
) -> list[ItemOutcome]:
    """Queue the delayed retries named now, instead of at their due time (None: the next
    `MAX_IDS` due). The job is unchanged (its RetryCount too): the attempt it makes counts on
    the schedule as it would have. Skipped: an id no longer delayed (3241: it ran already or
    was deleted), and all of them when Redis is down (5003, audited as a failure)."""
    if message_ids is None:
        _, waiting = queue.delayed_retries(0, MAX_IDS)
        wanted = [i.message_id for i in waiting if i.message_id is not None]
    else:
        wanted = _handles(message_ids, "重试ID")
    trail = begin_action(audit, actor, "retry_now", wanted, detail="all" if message_ids is None else None)
    try:
        done = queue.retry_delayed_now(wanted) if wanted else {}
    except QueueUnavailable:
        trail.finish("failed", detail="queue unavailable")
        raise
    items = [ItemOutcome(id=h, outcome=RETRIED) if done.get(h) else _skip(h, _GONE_DELAYED) for h in wanted]
    trail.finish(
        summarize(items, RETRIED),
        detail=("all; " if message_ids is None else "") + _counts(items, RETRIED),
    )
    return items


def delete_delayed_retries(
    uow: UnitOfWork, queue: QueueOperations, audit: AuditLog, actor: AdminActor, message_ids: Sequence[str]
) -> list[ItemOutcome]:
    """Delete the delayed retries named: no further attempt. A record whose last job it was
    is set to status 5 (生成失败), as when its attempts run out (without a dead letter: it can
    be regenerated), with its `report.retry_deleted` event in the same transaction; if that
    write fails, the reconciler sets it (the job index keeps the dead mark until the status is
    written). Skipped: an id no longer delayed (3241)."""
    wanted = _handles(message_ids, "重试ID")
    trail = begin_action(audit, actor, "delete_delayed", wanted)
    try:
        done = queue.delete_delayed(wanted)
    except QueueUnavailable:
        trail.finish("failed", detail="queue unavailable")
        raise
    failed_records = sorted({r for r in done.values() if r})
    deleted_of = {r: [h for h in wanted if done.get(h) == r] for r in failed_records}
    marked: list[int] = []
    try:
        marked = [
            r
            for r in failed_records
            if mark_generation_failed(
                uow,
                r,
                event_data={"messageIds": deleted_of[r]},
                actor=actor.name,
                event_type=EventType.REPORT_RETRY_DELETED,
            )
        ]
        queue.clear_dead_marks(failed_records)
    except (DatabaseUnavailable, QueueUnavailable):
        pass  # the dead marks stay: the reconciler sets the status and drops them
    items = [
        ItemOutcome(id=h, outcome=DELETED) if done.get(h) is not None else _skip(h, _GONE_DELAYED)
        for h in wanted
    ]
    detail = _counts(items, DELETED)
    if failed_records:
        detail += f"; records set to status 5: {', '.join(map(str, marked)) or 'none'}"
    trail.finish(summarize(items, DELETED), detail=detail)
    return items


def _skip(item_id: str, code_reason: tuple[int, str]) -> ItemOutcome:
    return ItemOutcome(id=item_id, outcome=SKIPPED, code=code_reason[0], reason=code_reason[1])


def _counts(items: Sequence[ItemOutcome], done: str) -> str:
    hits = sum(1 for item in items if item.outcome == done)
    return f"{hits} {done}, {len(items) - hits} skipped"
