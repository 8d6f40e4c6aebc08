"""Regeneration of every record matching a filter, by one admin call: a background task.

The admin call (`start_regenerate_matching`) does not touch the records: it counts the
matches (one indexed COUNT under a statement timeout), fixes the task's scope as "the
matching records with id <= the largest id now" and stores the task together with ONE
message for the worker (`TaskStore.create`, one atomic Redis step), so it returns in a
time independent of the number of matches.

The worker (`run_task`) walks the scope in keyset pages of `PAGE_SIZE` ids
(``id > cursor AND id <= max_id AND status = :status AND filters ORDER BY id``) and
hands each page to the set-based `services.usecases.admin.batch_regenerate` (reset to 3, one
enqueue call, the records' dead letters dropped), then records the cursor. A worker
killed mid-way has its message redelivered and the task resumes at the cursor: a page
done but not yet recorded is found again only if its records still match, which for
status 5 they no longer do (they are in 3 now); for status 3 that one page is queued a
second time (a job for a record no longer in 3 is skipped by the worker). A message
redelivered while its first run still runs (a worker that looked dead to the broker)
starts a second run: each page is recorded with a compare-and-set on the cursor, so the
counts stay exact and the run that loses the race stops.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from sqlalchemy import ColumnElement
from sqlalchemy.exc import DBAPIError

from services.domain.errors import (
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
    ServiceError,
)
from services.domain.limits import is_id, is_strict_int
from services.domain.opsmodel import AdminActor, AuditLog, QueueOperations
from services.domain.status import RecordStatus
from services.persistence.records import RecordRepository
from services.persistence.uow import UnitOfWork
from services.usecases.admin import batch_regenerate
from services.usecases.audit import begin_action
from services.usecases.ports import ReportQueue

logger = logging.getLogger(__name__)

#: Ids per page of a task: the largest batch `batch_regenerate` is given by the API too.
PAGE_SIZE = 1_000
#: A task's progress is kept this long after its last change (then it expires).
TASK_TTL_S = 7 * 24 * 3600
#: The admin call's COUNT gives up after this long (the call must answer in bounded time).
COUNT_TIMEOUT_MS = 5_000
#: The statuses a task may select: generating (stuck) or failed.
TASK_STATUSES = (int(RecordStatus.GENERATING), int(RecordStatus.FAILED))
#: The audit action of the admin call.
AUDIT_ACTION = "regenerate_matching"
#: A task id: a UUID4 in hex.
_TASK_ID = re.compile(r"[0-9a-f]{32}")
#: PostgreSQL's SQLSTATE for a statement cancelled by statement_timeout.
_QUERY_CANCELED = "57014"


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    #: What a reader makes of a task it cannot read (another type at its key, a state this
    #: version does not know): shown as such, never run.
    UNREADABLE = "unreadable"


class TaskAlreadyActive(InvalidOperation):
    """A task with the same filter is queued or running (its records would be queued twice)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"相同条件的任务尚未结束：{task_id}")
        self.task_id = task_id


class TooManyTasks(InvalidOperation):
    """The cap on tasks queued or running is reached."""

    def __init__(self, active: int) -> None:
        super().__init__(f"已有 {active} 个后台任务在排队或进行中，请等其中一个结束后再试")
        self.active = active


@dataclass(frozen=True)
class MatchFilter:
    """Which records a task regenerates; the submission range is half-open, times aware (UTC)."""

    status: int
    submitted_from: datetime | None = None
    submitted_to: datetime | None = None
    user_id: int | None = None

    def validate(self) -> None:
        if not is_strict_int(self.status) or self.status not in TASK_STATUSES:
            raise ParamError("参数 status 只能是 3（生成中）或 5（生成失败）")
        if self.user_id is not None and not is_id(self.user_id):
            raise ParamError("用户ID必须是正整数")
        for value in (self.submitted_from, self.submitted_to):
            if value is not None and value.tzinfo is None:
                raise ParamError("时间必须带时区")
        if self.submitted_from and self.submitted_to and self.submitted_from > self.submitted_to:
            raise ParamError("开始时间不能晚于结束时间")

    def conditions(self) -> list[ColumnElement[bool]]:
        """The filter as the records repository's WHERE (services/persistence/records.py)."""
        return RecordRepository.match_conditions(
            self.status, self.submitted_from, self.submitted_to, self.user_id
        )


@dataclass(frozen=True)
class Task:
    """A task and its progress, as `GET /api/admin/tasks/<id>` shows it."""

    task_id: str
    state: TaskState
    filter: MatchFilter
    #: Matches counted by the admin call (records may change state meanwhile).
    matched: int
    #: The scope's upper bound: records created after the call are left out.
    max_id: int
    #: The last id of the last page done (0 before the first).
    cursor: int = 0
    pages: int = 0
    regenerated: int = 0
    skipped: int = 0
    actor: str = ""
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None


@dataclass(frozen=True)
class TaskStarted:
    task_id: str
    matched: int


class TaskStore(Protocol):
    """Where tasks and their progress live (Redis: redis_adapters/task_store.py), each for TASK_TTL_S."""

    def create(self, task: Task) -> None:
        """Store the task and queue its one message, in one atomic step; `TaskAlreadyActive` when a
        task with the same filter is queued or running, `TooManyTasks` at the cap."""

    def get(self, task_id: str) -> Task | None: ...

    def started(self, task_id: str, at: datetime) -> None:
        """State running; the start time is kept from the first run."""

    def page_done(self, task_id: str, after: int, cursor: int, regenerated: int, skipped: int) -> bool:
        """Advance the cursor from `after` to `cursor` and add one page's counts, in one step, only
        if the cursor is still `after`; False when another run of the task recorded the page."""

    def finished(self, task_id: str, state: TaskState, at: datetime, error: str | None = None) -> None: ...


def start_regenerate_matching(
    uow: UnitOfWork,
    store: TaskStore,
    match: MatchFilter,
    *,
    actor: AdminActor | None = None,
    audit: AuditLog | None = None,
) -> TaskStarted:
    """Count the matches, store the task and queue its message; the records are not touched.

    ParamError (1001) for a bad filter or when the COUNT exceeds COUNT_TIMEOUT_MS (narrow
    the filter), QueueUnavailable (5003) when Redis refuses the task, `TaskAlreadyActive`
    (2005) when a task with the same filter is queued or running, `TooManyTasks` (2005)
    when too many tasks are. Audited as
    `regenerate_matching` (refusals too); refused first when the audit log is down.
    """
    trail = begin_action(audit, actor, AUDIT_ACTION, [], detail=describe(match))
    try:
        started = _start(uow, store, match, actor)
    except ServiceError as exc:
        trail.finish("failed", detail=f"{describe(match)}; {exc.code} {exc.message}")
        raise
    trail.finish("ok", ids=[started.task_id], detail=f"{describe(match)}; {started.matched} matched")
    return started


def describe(match: MatchFilter) -> str:
    parts = [f"status={match.status}"]
    if match.submitted_from:
        parts.append(f"submittedFrom={match.submitted_from.isoformat()}")
    if match.submitted_to:
        parts.append(f"submittedTo={match.submitted_to.isoformat()}")
    if match.user_id is not None:
        parts.append(f"userId={match.user_id}")
    return " ".join(parts)


def _start(uow: UnitOfWork, store: TaskStore, match: MatchFilter, actor: AdminActor | None) -> TaskStarted:
    match.validate()
    max_id, matched = _count(uow, match)
    task = Task(
        task_id=uuid.uuid4().hex,
        state=TaskState.QUEUED,
        filter=match,
        matched=matched,
        max_id=max_id,
        actor=actor.name if actor else "",
        created_at=datetime.now(UTC),
    )
    try:
        store.create(task)
    except ServiceError:
        raise
    except Exception as exc:
        logger.error("regeneration task could not be queued", exc_info=True)
        raise QueueUnavailable() from exc
    logger.info("regeneration task %s queued: %s, %d matched", task.task_id, describe(match), matched)
    return TaskStarted(task.task_id, matched)


def _count(uow: UnitOfWork, match: MatchFilter) -> tuple[int, int]:
    """(the largest id now, the matches up to it), under COUNT_TIMEOUT_MS."""
    with uow:
        try:
            max_id, matched = uow.records.count_matching(match.conditions(), COUNT_TIMEOUT_MS)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) == _QUERY_CANCELED:
                # The scope is too large to count in time: the admin narrows the filter.
                raise ParamError(f"统计匹配记录超过 {COUNT_TIMEOUT_MS // 1000} 秒，请缩小筛选范围") from exc
            raise
    return int(max_id), int(matched)


def get_task(store: TaskStore, task_id: str) -> Task:
    """The task's progress; RecordNotFound (3241) for an unknown or expired task."""
    task = store.get(task_id) if _TASK_ID.fullmatch(task_id) else None
    if task is None:
        raise RecordNotFound("任务不存在或已过期")
    return task


def _page(uow: UnitOfWork, task: Task, cursor: int, page_size: int) -> list[int]:
    with uow:
        return uow.records.matching_page(task.filter.conditions(), cursor, task.max_id, page_size)


def run_task(
    new_uow: Callable[[], UnitOfWork],
    queue: ReportQueue,
    dead_letters: QueueOperations | None,
    store: TaskStore,
    task_id: str,
    *,
    page_size: int = PAGE_SIZE,
) -> Task | None:
    """Run (or resume at its cursor) the task; its final progress, None if it is unknown.
    Each record reset has its `report.regenerated` event (actor ``task:<id>``) committed with
    its page's reset, so a worker killed after a page's commit loses none of them.

    Raises what a page raises (DatabaseUnavailable, QueueUnavailable when Redis refused a
    page's jobs, ...): the actor's retries resume the task later; the records of a page
    already reset stay in 3 and the reconciler queues them if their jobs were lost.
    """
    task = store.get(task_id)
    if task is None:
        logger.warning("regeneration task %s unknown or expired; nothing done", task_id)
        return None
    if task.state in (TaskState.DONE, TaskState.FAILED, TaskState.UNREADABLE):
        if task.state is TaskState.UNREADABLE:
            logger.warning("regeneration task %s cannot be read; nothing done", task_id)
        return task
    store.started(task_id, datetime.now(UTC))
    cursor, pages, regenerated, skipped = task.cursor, task.pages, task.regenerated, task.skipped
    while ids := _page(new_uow(), task, cursor, page_size):
        outcome = batch_regenerate(
            new_uow(),
            queue,
            ids,
            dead_letters=dead_letters,
            logged_as=f"task:{task_id}",
            event_data={"task": task_id},
        )
        if any(item.code == QueueUnavailable.code for item in outcome.items):
            raise QueueUnavailable(f"task {task_id}: the report queue refused a page after id {cursor}")
        if not store.page_done(
            task_id, cursor, ids[-1], outcome.result.success_count, outcome.result.skipped_count
        ):
            # The message was delivered again while this run still ran (at least once): the
            # other run recorded this page and goes on; the page's records were only reset twice.
            logger.warning(
                "regeneration task %s: another run recorded the page after id %d; this one stops",
                task_id,
                cursor,
            )
            return store.get(task_id)
        cursor = ids[-1]
        pages += 1
        regenerated += outcome.result.success_count
        skipped += outcome.result.skipped_count
    finished_at = datetime.now(UTC)
    store.finished(task_id, TaskState.DONE, finished_at)
    logger.info(
        "regeneration task %s done: %d page(s), %d regenerated, %d skipped",
        task_id,
        pages,
        regenerated,
        skipped,
    )
    return replace(
        task,
        state=TaskState.DONE,
        cursor=cursor,
        pages=pages,
        regenerated=regenerated,
        skipped=skipped,
        finished_at=finished_at,
    )
