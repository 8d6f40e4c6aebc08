"""The admin API under /api/admin/ (admin token required): records, regeneration, queue, events,
dead letters, quarantined payloads, audit.

Actions are logged to the event log with the admin's token fingerprint (web/event_logging.py)
and audited in PostgreSQL (services/usecases/audit.py): an action whose audit cannot be written
is refused with 503. The operations call the same service functions as the CLI
(services/usecases/operations.py).
"""

from __future__ import annotations

import logging
from dataclasses import asdict

import redis
from flask import Blueprint

from redis_adapters.queue_figures import QUEUE_NAMES, queue_figures
from redis_adapters.queues import REPORT_QUEUE_NAME
from services.domain.errors import QueueUnavailable
from services.domain.views import RecordFilter
from services.persistence import event_store
from services.usecases import admin, drill, operations, regeneration_tasks
from services.usecases.regeneration_tasks import MatchFilter
from web import deps
from web.auth import current_admin, require_admin
from web.deps import (
    audit_log,
    autosave_store,
    fault_drill,
    new_uow,
    queue_operations,
    redis_client,
    report_queue,
    task_store,
)
from web.request_models import (
    AuditQuery,
    DrillStartRequest,
    DrillStopRequest,
    EmptyRequest,
    EventsQuery,
    HandlesRequest,
    IdRequest,
    IdsRequest,
    KeysRequest,
    OffsetLimit,
    RecordListQuery,
    RegenerateMatchingRequest,
    RequeueRequest,
)
from web.response_models import (
    AdminRecordPage,
    AuditPage,
    BatchRegenerateResult,
    DeadLetterPage,
    DelayedRetryPage,
    DrilledRecords,
    DrillStopped,
    EventPage,
    InvalidPayloadPage,
    ItemOutcomes,
    Purged,
    QueueStats,
    Task,
    TaskStarted,
)
from web.spec import Reply, admin_operation, success

bp = Blueprint("admin_api", __name__, url_prefix="/api/admin")
bp.before_request(require_admin)

log = logging.getLogger(__name__)


@bp.post("/assessmentRecord/regenerateReport")
@admin_operation(None, 404, 409, 503)
def regenerate_report(json: IdRequest) -> Reply:
    """Regenerate the report of a record in status 3 or 5

    Resets the record to 3, clears its results and summary, and queues a job with RetryCount
    0. 3241 if the record is missing or soft-deleted, 2005 (当前状态不允许重新生成) for another
    status, 5003 if the job could not be queued.
    """
    # Its `report.regenerated` event is committed with the reset (services/usecases/change_events.py).
    admin.regenerate_report(
        new_uow(),
        report_queue(),
        json.id,
        actor=current_admin(),
        audit=audit_log(),
        dead_letters=queue_operations(),
    )
    return success()


@bp.post("/assessmentRecord/batchRegenerateReport")
@admin_operation(BatchRegenerateResult)
def batch_regenerate_report(json: IdsRequest) -> Reply:
    """Regenerate the reports of the records in status 3 or 5 among `ids`

    Every other id (missing, soft-deleted, wrong status) is skipped; successCount +
    skippedCount == len(ids). An empty list is 1001; so are duplicate ids and more than 1,000
    ids.
    """
    outcome = admin.batch_regenerate(
        new_uow(),
        report_queue(),
        json.ids,
        actor=current_admin(),
        audit=audit_log(),
        dead_letters=queue_operations(),
    )
    return success(outcome.result)


@bp.post("/assessmentRecord/regenerateMatching")
@admin_operation(TaskStarted, status=202)
def regenerate_matching(json: RegenerateMatchingRequest) -> Reply:
    """Regenerate every record matching a filter, in the background (202)

    Counts the matching live records (status 3 or 5, optionally submitted in [submittedFrom,
    submittedTo) and of one user), fixes the scope to those with an id up to the largest id
    now, queues one task for the worker and answers 202 {taskId, matched} without touching the
    records, in a time independent of their number. The worker resets and queues them a page
    at a time, as batchRegenerateReport does; progress at GET /api/admin/tasks/{task_id}.
    Audited; refused (503) if the audit cannot be written or the task cannot be queued.
    """
    match = MatchFilter(
        status=json.status,
        submitted_from=json.submitted_from,
        submitted_to=json.submitted_to,
        user_id=json.user_id,
    )
    started = regeneration_tasks.start_regenerate_matching(
        new_uow(), task_store(), match, actor=current_admin(), audit=audit_log()
    )
    return success(started, status=202)


@bp.get("/tasks/<task_id>")
@admin_operation(Task, 404)
def task(task_id: str) -> Reply:
    """An admin task's progress (kept 7 days after its last change)"""
    return success(regeneration_tasks.get_task(task_store(), task_id))


@bp.get("/assessmentRecord/list")
@admin_operation(AdminRecordPage)
def list_records(query: RecordListQuery) -> Reply:
    """A page of records, newest first"""
    filters = RecordFilter(
        status=query.status,
        user_id=query.user_id,
        include_deleted=query.include_deleted,
        created_from=query.created_from,
        created_to=query.created_to,
    )
    return success(admin.list_records(new_uow(), filters, query.page, query.page_size))


@bp.post("/assessmentRecord/delete")
@admin_operation(None, 404)
def delete_record(json: IdRequest) -> Reply:
    """Soft-delete a record (3241 if missing or already deleted)

    The record disappears from users and from regeneration; rows are kept.
    """
    admin.soft_delete_record(new_uow(), json.id, actor=current_admin(), audit=audit_log())
    try:
        # A save cached as "in progress" must now find the record gone.
        autosave_store().release(json.id, submitted=False)
    except Exception:
        log.warning("could not drop the cached status of deleted record %s", json.id)
    return success()


@bp.get("/assessmentRecord/events")
@admin_operation(EventPage, 404)
def record_events(query: EventsQuery) -> Reply:
    """The event log of a record, oldest first

    User, admin and worker actions on the record (created, started, answers saved, submitted,
    report generated, a failed attempt, dead-lettered, regenerated, deleted). Events reach the
    log through Redis and appear within about a second. 3241 if no such record was ever created
    and no event names it.
    """
    return success(event_store.list_record_events(new_uow(), query.id, query.page, query.page_size))


@bp.get("/queue/stats")
@admin_operation(QueueStats)
def queue_stats() -> Reply:
    """Figures of the report queue (and of every queue, under `queues`)"""
    try:
        figures = {
            name: queue_figures(redis_client(), name, hash_tag=deps.keyspace().hash_tags)
            for name in QUEUE_NAMES
        }
    except redis.RedisError as exc:
        raise QueueUnavailable(f"queue figures unavailable: {exc}") from exc
    return success({**asdict(figures[REPORT_QUEUE_NAME]), "queues": figures})


@bp.get("/queue/dead")
@admin_operation(DeadLetterPage)
def dead_letters(query: OffsetLimit) -> Reply:
    """Dead letters of report:queue:dead, newest first

    Each with its RecordId, attempts, last error and time (older ones may lack them).
    """
    return success(operations.list_dead_letters(queue_operations(), offset=query.offset, limit=query.limit))


@bp.post("/queue/dead/requeue")
@admin_operation(ItemOutcomes)
def requeue_dead_letters(json: RequeueRequest) -> Reply:
    """Requeue dead letters: RetryCount 0, record back to 3

    ``{"ids": [...]}`` or ``{"all": true}``. Per dead letter: its record (status 3 or 5) is
    reset to 3 (生成中), then the entry is removed and a fresh job queued in one atomic step.
    Skipped with a code: 3241 the letter is gone or its record missing, 2005 the record's status
    (e.g. 4: delete the letter), 1001 no RecordId, 5003 Redis down. Audited; refused (503) if
    the audit cannot be written.
    """
    items = operations.requeue_dead_letters(
        new_uow(), queue_operations(), audit_log(), current_admin(), json.ids
    )
    return success({"items": items})


@bp.post("/queue/dead/delete")
@admin_operation(ItemOutcomes)
def delete_dead_letters(json: HandlesRequest) -> Reply:
    """Delete dead letters (their records keep their status); audited"""
    items = operations.delete_dead_letters(queue_operations(), audit_log(), current_admin(), json.ids)
    return success({"items": items})


@bp.get("/queue/delayed")
@admin_operation(DelayedRetryPage)
def delayed_retries(query: OffsetLimit) -> Reply:
    """Delayed retries of the report queue, soonest due first

    Each with its RecordId, attempts made, due time and the record's last error.
    """
    return success(
        operations.list_delayed_retries(new_uow(), queue_operations(), offset=query.offset, limit=query.limit)
    )


@bp.post("/queue/delayed/retryNow")
@admin_operation(ItemOutcomes)
def retry_delayed_now(json: RequeueRequest) -> Reply:
    """Queue delayed retries now (the job and its RetryCount unchanged); audited

    ``{"ids": [...]}`` or ``{"all": true}`` (the next 1,000 due). Skipped with a code: 3241
    the retry is no longer delayed (it ran, or was deleted), 5003 Redis down.
    """
    items = operations.retry_delayed_now(queue_operations(), audit_log(), current_admin(), json.ids)
    return success({"items": items})


@bp.post("/queue/delayed/delete")
@admin_operation(ItemOutcomes)
def delete_delayed_retries(json: HandlesRequest) -> Reply:
    """Delete delayed retries: no further attempt; their records set to 5 (生成失败); audited"""
    items = operations.delete_delayed_retries(
        new_uow(), queue_operations(), audit_log(), current_admin(), json.ids
    )
    return success({"items": items})


@bp.get("/drill")
@admin_operation(DrilledRecords)
def drill_records() -> Reply:
    """The fault drill: records whose generation is made to fail now

    Each with the drill's end.
    """
    return success({"items": drill.list_fault_drill(fault_drill())})


@bp.post("/drill/start")
@admin_operation(DrilledRecords)
def start_drill(json: DrillStartRequest) -> Reply:
    """Make these records' report generation fail (for `minutes`, default 60, at most a day); audited

    For rehearsing failures: each attempt of a drilled record fails with a fault-drill error and
    takes the product's own path (retries at 10/30/60 s, then the dead letter and status 5).
    """
    started = drill.start_fault_drill(
        fault_drill(), audit_log(), current_admin(), json.ids, minutes=json.minutes
    )
    return success({"items": started})


@bp.post("/drill/stop")
@admin_operation(DrillStopped)
def stop_drill(json: DrillStopRequest) -> Reply:
    """End the fault drill of these records (or of all); audited"""
    return success({"stopped": drill.stop_fault_drill(fault_drill(), audit_log(), current_admin(), json.ids)})


@bp.get("/queue/invalid")
@admin_operation(InvalidPayloadPage)
def invalid_payloads(query: OffsetLimit) -> Reply:
    """Quarantined payloads of report:queue:invalid, verbatim, newest first"""
    return success(operations.list_invalid(queue_operations(), offset=query.offset, limit=query.limit))


@bp.post("/queue/invalid/delete")
@admin_operation(ItemOutcomes)
def delete_invalid(json: KeysRequest) -> Reply:
    """Delete quarantined payloads; audited"""
    items = operations.delete_invalid(queue_operations(), audit_log(), current_admin(), json.keys)
    return success({"items": items})


@bp.post("/queue/invalid/purge")
@admin_operation(Purged)
def purge_invalid(json: EmptyRequest) -> Reply:
    """Drop every quarantined payload; audited

    The body is any JSON object: no purge by a stray form post.
    """
    return success({"purged": operations.purge_invalid(queue_operations(), audit_log(), current_admin())})


@bp.get("/audit")
@admin_operation(AuditPage)
def audit(query: AuditQuery) -> Reply:
    """The audit trail of admin actions, newest first

    Every admin action (API, CLI, console): who, which credential, what, which ids, outcome,
    when. Kept in PostgreSQL (the event log, types admin.<action>). Filters: actor, action,
    since, until (ADMIN_TIMEZONE when without an offset).
    """
    return success(
        operations.list_audit(
            new_uow(),
            actor=query.actor,
            action=query.action,
            since=query.since,
            until=query.until,
            offset=query.offset,
            limit=query.limit,
        )
    )
