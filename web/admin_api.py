"""The admin API under /api/admin/ (admin token required): records, regeneration, queue, events.

Actions are logged to the event log with the admin's token fingerprint (web/events.py).
"""

from __future__ import annotations

import logging

import redis
from flask import Blueprint, Response, request

from actors.adapters import queue_figures
from services import admin, event_store
from services.errors import MSG_EMPTY_ID_LIST, QueueUnavailable
from services.events import EventType
from services.limits import MAX_ID
from services.status import RecordStatus
from services.views import RecordFilter
from web import deps
from web.auth import require_admin
from web.deps import autosave_store, new_uow, redis_client, report_queue
from web.envelope import ok
from web.events import log_event, log_events
from web.validation import (
    body_id,
    body_id_list,
    json_object,
    optional_query_int,
    page_params,
    query_bool,
    query_datetime,
    query_id,
)

bp = Blueprint("admin_api", __name__, url_prefix="/api/admin")
bp.before_request(require_admin)

log = logging.getLogger(__name__)


@bp.post("/assessmentRecord/regenerateReport")
def regenerate_report() -> Response:
    record_id = body_id(json_object(request), "id")
    admin.regenerate_report(new_uow(), report_queue(), record_id)
    log_event(EventType.REPORT_REGENERATED, record_id=record_id, batch=False)
    return ok()


@bp.post("/assessmentRecord/batchRegenerateReport")
def batch_regenerate_report() -> Response:
    ids = body_id_list(json_object(request), "ids", empty_message=MSG_EMPTY_ID_LIST)
    outcome = admin.batch_regenerate(new_uow(), report_queue(), ids)
    log_events(EventType.REPORT_REGENERATED, outcome.queued, batch=True, requested=len(ids))
    return ok(outcome.result)


@bp.get("/assessmentRecord/list")
def list_records() -> Response:
    args = request.args
    filters = RecordFilter(
        status=optional_query_int(args, "status", min(RecordStatus), max(RecordStatus)),
        user_id=optional_query_int(args, "userId", 1, MAX_ID),
        include_deleted=query_bool(args, "includeDeleted"),
        created_from=query_datetime(args, "createdFrom"),
        created_to=query_datetime(args, "createdTo"),
    )
    page, page_size = page_params(args)
    return ok(admin.list_records(new_uow(), filters, page, page_size))


@bp.post("/assessmentRecord/delete")
def delete_record() -> Response:
    """Soft delete: the record disappears from users and from regeneration; rows are kept."""
    record_id = body_id(json_object(request), "id")
    admin.soft_delete_record(new_uow(), record_id)
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
    try:
        figures = queue_figures(redis_client(), hash_tag=deps.current().settings.redis_hash_tags)
    except redis.RedisError as exc:
        raise QueueUnavailable(f"queue figures unavailable: {exc}") from exc
    return ok(figures)
