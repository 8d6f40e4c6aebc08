"""The admin API under /api/admin/ (admin token required): records, regeneration, queue."""

from __future__ import annotations

import redis
from flask import Blueprint, Response, request

from actors.monitor import queue_figures
from services import admin
from services.errors import MSG_EMPTY_ID_LIST, QueueUnavailable
from services.status import RecordStatus
from services.views import RecordFilter
from web.auth import require_admin
from web.deps import new_uow, redis_client, report_queue
from web.envelope import ok
from web.validation import (
    MAX_ID,
    body_id,
    body_id_list,
    json_object,
    optional_query_int,
    page_params,
    query_bool,
    query_datetime,
)

bp = Blueprint("admin_api", __name__, url_prefix="/api/admin")
bp.before_request(require_admin)


@bp.post("/assessmentRecord/regenerateReport")
def regenerate_report() -> Response:
    record_id = body_id(json_object(request), "id")
    admin.regenerate_report(new_uow(), report_queue(), record_id)
    return ok()


@bp.post("/assessmentRecord/batchRegenerateReport")
def batch_regenerate_report() -> Response:
    ids = body_id_list(json_object(request), "ids", empty_message=MSG_EMPTY_ID_LIST)
    return ok(admin.batch_regenerate_report(new_uow(), report_queue(), ids))


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
    return ok()


@bp.get("/queue/stats")
def queue_stats() -> Response:
    try:
        figures = queue_figures(redis_client())
    except redis.RedisError as exc:
        raise QueueUnavailable(f"queue figures unavailable: {exc}") from exc
    return ok(figures)
