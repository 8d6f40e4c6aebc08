"""The admin API under /api/admin/ (admin token required): records, regeneration, queue, events,
dead letters, quarantined payloads, audit.

Actions are logged to the event log with the admin's token fingerprint (web/event_logging.py)
and audited in PostgreSQL (services/usecases/audit.py): an action whose audit cannot be written
is refused with 503. The operations call the same service functions as the CLI
(services/usecases/operations.py).
"""

from __future__ import annotations

import logging
from datetime import tzinfo

import redis
from flask import Blueprint, Response, request
from werkzeug.datastructures import MultiDict

from redis_adapters.queue_figures import queue_figures
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME
from services.domain.errors import MSG_EMPTY_ID_LIST, ParamError, QueueUnavailable
from services.domain.events import MAX_ACTOR_LENGTH, EventType
from services.domain.limits import MAX_ID, is_strict_int
from services.domain.status import RecordStatus
from services.domain.views import RecordFilter
from services.persistence import event_store
from services.usecases import admin, drill, operations, regeneration_tasks
from services.usecases.regeneration_tasks import TASK_STATUSES, MatchFilter
from web import deps
from web.auth import current_admin, require_admin
from web.deps import (
    audit_log,
    autosave_store,
    current,
    fault_drill,
    new_uow,
    queue_operations,
    redis_client,
    report_queue,
    task_store,
)
from web.envelope import SUCCESS_CODE, SUCCESS_MESSAGE, envelope, ok
from web.event_logging import log_event, log_events
from web.jsonify import to_json
from web.validation import (
    body_datetime,
    body_handle_list,
    body_id,
    body_id_list,
    int_in_range,
    json_object,
    optional_query_int,
    optional_query_text,
    page_params,
    query_bool,
    query_datetime,
    query_id,
    query_int,
    required,
)

bp = Blueprint("admin_api", __name__, url_prefix="/api/admin")
#: Page size of the operations' lists (offset/limit paging).
DEFAULT_LIMIT = 50
bp.before_request(require_admin)
#: Every Dramatiq queue of the product, as `queue/stats` lists them.
QUEUES = (REPORT_QUEUE_NAME, ADMIN_QUEUE_NAME)

log = logging.getLogger(__name__)


@bp.post("/assessmentRecord/regenerateReport")
def regenerate_report() -> Response:
    record_id = body_id(json_object(request), "id")
    admin.regenerate_report(
        new_uow(),
        report_queue(),
        record_id,
        actor=current_admin(),
        audit=audit_log(),
        dead_letters=queue_operations(),
    )
    log_event(EventType.REPORT_REGENERATED, record_id=record_id, batch=False)
    return ok()


@bp.post("/assessmentRecord/batchRegenerateReport")
def batch_regenerate_report() -> Response:
    ids = body_id_list(json_object(request), "ids", empty_message=MSG_EMPTY_ID_LIST)
    outcome = admin.batch_regenerate(
        new_uow(),
        report_queue(),
        ids,
        actor=current_admin(),
        audit=audit_log(),
        dead_letters=queue_operations(),
    )
    log_events(EventType.REPORT_REGENERATED, outcome.queued, batch=True, requested=len(ids))
    return ok(outcome.result)


@bp.post("/assessmentRecord/regenerateMatching")
def regenerate_matching() -> Response:
    """Regenerate every record matching a filter, in the background: 202 ``{taskId, matched}``
    at once, whatever the number of matches; progress at ``GET /api/admin/tasks/<taskId>``."""
    body = json_object(request)
    status = required(body, "status")
    if not is_strict_int(status) or status not in TASK_STATUSES:
        raise ParamError("参数 status 只能是 3（生成中）或 5（生成失败）")
    user_id = body.get("userId")
    match = MatchFilter(
        status=status,
        submitted_from=body_datetime(body, "submittedFrom", admin_zone()),
        submitted_to=body_datetime(body, "submittedTo", admin_zone()),
        user_id=None if user_id is None else int_in_range(user_id, "userId", 1, MAX_ID),
    )
    started = regeneration_tasks.start_regenerate_matching(
        new_uow(), task_store(), match, actor=current_admin(), audit=audit_log()
    )
    return envelope(SUCCESS_CODE, SUCCESS_MESSAGE, started, status=202)


@bp.get("/tasks/<task_id>")
def task(task_id: str) -> Response:
    """An admin task's progress (kept 7 days after its last change)."""
    return ok(regeneration_tasks.get_task(task_store(), task_id))


@bp.get("/assessmentRecord/list")
def list_records() -> Response:
    args = request.args
    filters = RecordFilter(
        status=optional_query_int(args, "status", min(RecordStatus), max(RecordStatus)),
        user_id=optional_query_int(args, "userId", 1, MAX_ID),
        include_deleted=query_bool(args, "includeDeleted"),
        created_from=query_datetime(args, "createdFrom", admin_zone()),
        created_to=query_datetime(args, "createdTo", admin_zone()),
    )
    page, page_size = page_params(args)
    return ok(admin.list_records(new_uow(), filters, page, page_size))


@bp.post("/assessmentRecord/delete")
def delete_record() -> Response:
    """Soft delete: the record disappears from users and from regeneration; rows are kept."""
    record_id = body_id(json_object(request), "id")
    admin.soft_delete_record(new_uow(), record_id, actor=current_admin(), audit=audit_log())
    try:
        # A save cached as "in progress" must now find the record gone.
        autosave_store().release(record_id, submitted=False)
    except Exception:
        log.warning("could not drop the cached status of deleted record %s", record_id)
    log_event(EventType.RECORD_DELETED, record_id=record_id)
    return ok()


@bp.get("/assessmentRecord/events")
def record_events() -> Response:
    """The record's event log, oldest first, paged (ingested within about a second)."""
    record_id = query_id(request.args, "id")
    page, page_size = page_params(request.args)
    return ok(event_store.list_record_events(new_uow(), record_id, page, page_size))


@bp.get("/queue/stats")
def queue_stats() -> Response:
    """The report queue's figures (at the top, as before), and every queue's under `queues`."""
    try:
        figures = {
            name: queue_figures(redis_client(), name, hash_tag=deps.keyspace().hash_tags) for name in QUEUES
        }
    except redis.RedisError as exc:
        raise QueueUnavailable(f"queue figures unavailable: {exc}") from exc
    return ok({**to_json(figures[REPORT_QUEUE_NAME]), "queues": figures})


def admin_zone() -> tzinfo:
    """ADMIN_TIMEZONE: where an admin's date/time without an offset is read."""
    return current().settings.admin_zone


def _offset_limit() -> tuple[int, int]:
    args = request.args
    return (
        query_int(args, "offset", 0, 0, MAX_ID),
        query_int(args, "limit", DEFAULT_LIMIT, 1, operations.MAX_PAGE_SIZE),
    )


@bp.get("/queue/dead")
def dead_letters() -> Response:
    """A page of `report:queue:dead`, newest first: RecordId, attempts, last error, time, entry."""
    offset, limit = _offset_limit()
    return ok(operations.list_dead_letters(queue_operations(), offset=offset, limit=limit))


@bp.post("/queue/dead/requeue")
def requeue_dead_letters() -> Response:
    """``{"ids": [...]}`` or ``{"all": true}``: one outcome per dead letter."""
    body = json_object(request)
    if "all" in body:
        if body["all"] is not True or body.get("ids") is not None:
            raise ParamError('请求体为 {"ids": [...]} 或 {"all": true}，二者只能给出一个')
        ids = None
    else:
        ids = body_handle_list(body, "ids")
    items = operations.requeue_dead_letters(new_uow(), queue_operations(), audit_log(), current_admin(), ids)
    return ok({"items": items})


@bp.post("/queue/dead/delete")
def delete_dead_letters() -> Response:
    ids = body_handle_list(json_object(request), "ids")
    items = operations.delete_dead_letters(queue_operations(), audit_log(), current_admin(), ids)
    return ok({"items": items})


@bp.get("/queue/delayed")
def delayed_retries() -> Response:
    """A page of the report queue's delayed retries, soonest due first."""
    offset, limit = _offset_limit()
    return ok(operations.list_delayed_retries(new_uow(), queue_operations(), offset=offset, limit=limit))


@bp.post("/queue/delayed/retryNow")
def retry_delayed_now() -> Response:
    """``{"ids": [...]}`` or ``{"all": true}``: queue these retries now; one outcome each."""
    items = operations.retry_delayed_now(queue_operations(), audit_log(), current_admin(), _ids_or_all())
    return ok({"items": items})


@bp.post("/queue/delayed/delete")
def delete_delayed_retries() -> Response:
    ids = body_handle_list(json_object(request), "ids")
    items = operations.delete_delayed_retries(
        new_uow(), queue_operations(), audit_log(), current_admin(), ids
    )
    return ok({"items": items})


def _ids_or_all() -> list[str] | None:
    body = json_object(request)
    if "all" in body:
        if body["all"] is not True or body.get("ids") is not None:
            raise ParamError('请求体为 {"ids": [...]} 或 {"all": true}，二者只能给出一个')
        return None
    return body_handle_list(body, "ids")


@bp.get("/drill")
def drill_records() -> Response:
    """The records whose generation the fault drill makes fail now, with the drill's end."""
    return ok({"items": drill.list_fault_drill(fault_drill())})


@bp.post("/drill/start")
def start_drill() -> Response:
    """``{"ids": [...], "minutes": 60}``: make these records' generation fail until then."""
    body = json_object(request)
    ids = body_id_list(body, "ids", empty_message=MSG_EMPTY_ID_LIST)
    minutes = body.get("minutes", drill.DEFAULT_DRILL_MINUTES)
    minutes = int_in_range(minutes, "minutes", 1, drill.MAX_DRILL_MINUTES)
    started = drill.start_fault_drill(fault_drill(), audit_log(), current_admin(), ids, minutes=minutes)
    return ok({"items": started})


@bp.post("/drill/stop")
def stop_drill() -> Response:
    """``{"ids": [...]}`` or ``{"all": true}``: end the drill of these records (or of all)."""
    body = json_object(request)
    if "all" in body:
        if body["all"] is not True or body.get("ids") is not None:
            raise ParamError('请求体为 {"ids": [...]} 或 {"all": true}，二者只能给出一个')
        ids = None
    else:
        ids = body_id_list(body, "ids", empty_message=MSG_EMPTY_ID_LIST)
    return ok({"stopped": drill.stop_fault_drill(fault_drill(), audit_log(), current_admin(), ids)})


@bp.get("/queue/invalid")
def invalid_payloads() -> Response:
    """A page of `report:queue:invalid` (payloads that could not be decoded), verbatim."""
    offset, limit = _offset_limit()
    return ok(operations.list_invalid(queue_operations(), offset=offset, limit=limit))


@bp.post("/queue/invalid/delete")
def delete_invalid() -> Response:
    keys = body_handle_list(json_object(request), "keys")
    items = operations.delete_invalid(queue_operations(), audit_log(), current_admin(), keys)
    return ok({"items": items})


@bp.post("/queue/invalid/purge")
def purge_invalid() -> Response:
    json_object(request)  # a JSON body, as every POST: no purge by a stray form post
    return ok({"purged": operations.purge_invalid(queue_operations(), audit_log(), current_admin())})


@bp.get("/audit")
def audit() -> Response:
    """Audit entries, newest first; filters: actor, action, since, until (ADMIN_TIMEZONE when naive)."""
    args = request.args
    offset, limit = _offset_limit()
    return ok(
        operations.list_audit(
            new_uow(),
            actor=_label(args, "actor"),
            action=_label(args, "action"),
            since=query_datetime(args, "since", admin_zone()),
            until=query_datetime(args, "until", admin_zone()),
            offset=offset,
            limit=limit,
        )
    )


def _label(args: MultiDict[str, str], name: str) -> str | None:
    """An actor or action filter: printable, at most MAX_ACTOR_LENGTH characters."""
    value = optional_query_text(args, name)
    if value is not None and (len(value) > MAX_ACTOR_LENGTH or not value.isprintable()):
        raise ParamError(f"参数 {name} 必须是不超过 {MAX_ACTOR_LENGTH} 个可打印字符")
    return value
