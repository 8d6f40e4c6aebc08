"""Records: the filtered, paged list; regenerate one or a selection, or every failed record
(a background task, its progress on its own page); one record's detail, with where its
generation stands (a fault drill on it, its next retry's due time).

Filters come from the query string as a form sends them; a value that cannot be read is
named on the page and ignored, never a failed page. Dates are days in the admin's time
zone: "from 2026-12-01 to 2026-12-01" is that whole day there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from flask import flash, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response as WerkzeugResponse

from services.domain.errors import QueueUnavailable, ServiceError
from services.domain.limits import MAX_ID
from services.domain.opsmodel import DelayedRetry
from services.domain.status import REGENERATABLE, STATUS_TEXT, RecordStatus
from services.domain.views import RecordFilter
from services.persistence import event_store
from services.usecases import admin, drill, operations, regeneration_tasks
from services.usecases.drill import DrilledRecord
from services.usecases.record_detail import admin_record_detail
from web.console.acting import actor
from web.console.blueprint import bp
from web.console.display import admin_timezone, day_after, day_start, parse_day
from web.console.outcomes import show_outcome
from web.deps import audit_log, current, fault_drill, new_uow, queue_operations, report_queue, task_store
from web.report_page import dimensions_chart

log = logging.getLogger(__name__)

PAGE_SIZE = 20
#: Most ids one batch form may carry (a page holds `PAGE_SIZE`; more is a forged form).
MAX_BATCH = 500


@dataclass
class RecordQuery:
    """The list's filters as typed, what they mean, and what could not be read."""

    status: str = ""
    user: str = ""
    date_from: str = ""
    date_to: str = ""
    page: int = 1
    filters: RecordFilter = field(default_factory=RecordFilter)
    problems: list[str] = field(default_factory=list)

    def args(self, **changes: Any) -> dict[str, Any]:
        """The query string of this list (for paging links), with `changes`."""
        values: dict[str, Any] = {
            "status": self.status,
            "user": self.user,
            "from": self.date_from,
            "to": self.date_to,
            "page": self.page,
        }
        values.update(changes)
        return {k: v for k, v in values.items() if v not in ("", None)}


def _int(text: str, low: int, high: int) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if low <= value <= high else None


def read_query(args: MultiDict[str, str]) -> RecordQuery:
    tz = admin_timezone(current().settings)
    query = RecordQuery(
        status=args.get("status", "").strip(),
        user=args.get("user", "").strip(),
        date_from=args.get("from", "").strip(),
        date_to=args.get("to", "").strip(),
        page=_int(args.get("page", "1"), 1, MAX_ID // PAGE_SIZE) or 1,
    )
    status = user_id = None
    created_from = created_to = None
    if query.status:
        status = _int(query.status, min(RecordStatus), max(RecordStatus))
        if status is None:
            query.problems.append(f"状态“{query.status}”无效，已忽略")
    if query.user:
        user_id = _int(query.user, 1, MAX_ID)
        if user_id is None:
            query.problems.append(f"用户ID“{query.user}”必须是正整数，已忽略")
    if query.date_from:
        day = parse_day(query.date_from)
        if day is None:
            query.problems.append(f"开始日期“{query.date_from}”无效（格式 2026-12-01），已忽略")
        else:
            created_from = day_start(day, tz)
    if query.date_to:
        day = parse_day(query.date_to)
        if day is None:
            query.problems.append(f"结束日期“{query.date_to}”无效（格式 2026-12-01），已忽略")
        else:
            created_to = day_after(day, tz)
    if created_from and created_to and created_from >= created_to:
        query.problems.append("开始日期晚于结束日期，日期条件已忽略")
        created_from = created_to = None
    query.filters = RecordFilter(
        status=status, user_id=user_id, created_from=created_from, created_to=created_to
    )
    return query


@bp.get("/records")
def records() -> str:
    query = read_query(request.args)
    page = admin.list_records(new_uow(), query.filters, query.page, PAGE_SIZE)
    return render_template(
        "console/records.html",
        query=query,
        page=page,
        statuses=STATUS_TEXT,
        regeneratable={int(s) for s in REGENERATABLE},
    )


def _back_to_list() -> str:
    """The list the admin came from (its filters kept), from the form's hidden field."""
    back = request.form.get("back", "")
    if back.isprintable() and back.startswith(url_for("console.records") + "?"):
        return back
    return url_for("console.records")


@bp.post("/records/<int:record_id>/regenerate")
def regenerate_one(record_id: int) -> WerkzeugResponse:
    try:
        admin.regenerate_report(
            new_uow(),
            report_queue(),
            record_id,
            actor=actor(),
            audit=audit_log(),
            dead_letters=queue_operations(),
        )
    except ServiceError as exc:
        flash(f"记录 {record_id} 未能重新生成：{exc.message}", "error")
    else:
        flash(f"记录 {record_id} 已重新加入生成队列", "ok")
    if request.form.get("from_detail"):
        return redirect(url_for("console.record", record_id=record_id))
    return redirect(_back_to_list())


@bp.post("/records/regenerate")
def regenerate_selected() -> WerkzeugResponse:
    raw = request.form.getlist("ids")
    ids = [i for i in (_int(r, 1, MAX_ID) for r in raw[:MAX_BATCH]) if i is not None]
    if not ids:
        flash("请先勾选要重新生成的记录", "error")
        return redirect(_back_to_list())
    outcome = admin.batch_regenerate(
        new_uow(), report_queue(), ids, actor=actor(), audit=audit_log(), dead_letters=queue_operations()
    )
    return show_outcome("批量重新生成结果", outcome.items, "记录ID", _back_to_list())


@bp.post("/records/regenerate-failed")
def regenerate_failed() -> WerkzeugResponse:
    """Every record in status 5, by one task in the worker (as regenerateMatching {status: 5})."""
    try:
        started = regeneration_tasks.start_regenerate_matching(
            new_uow(),
            task_store(),
            regeneration_tasks.MatchFilter(status=int(RecordStatus.FAILED)),
            actor=actor(),
            audit=audit_log(),
        )
    except regeneration_tasks.TaskAlreadyActive as exc:
        # Clicked twice, or by two admins: the one task already on its way is the answer.
        flash("生成失败记录的重新生成任务已在进行，以下是它的进度", "info")
        return redirect(url_for("console.task", task_id=exc.task_id))
    except ServiceError as exc:
        flash(f"未能开始重新生成：{exc.message}", "error")
        return redirect(_back_to_list())
    flash(f"已开始在后台重新生成 {started.matched} 条生成失败的记录", "ok")
    return redirect(url_for("console.task", task_id=started.task_id))


@bp.get("/tasks/<task_id>")
def task(task_id: str) -> str:
    """A task's progress; the page reloads itself every 2 s until the task ends."""
    return render_template("console/task.html", task=regeneration_tasks.get_task(task_store(), task_id))


@dataclass(frozen=True)
class InThePipeline:
    """Where a record's generation stands beyond its status: a fault drill making its attempts
    fail, and the retries waiting for their due time. `unreadable`: Redis could not be read."""

    drilled: DrilledRecord | None = None
    retries: list[DelayedRetry] = field(default_factory=list)
    unreadable: bool = False


def in_the_pipeline(record_id: int) -> InThePipeline:
    try:
        drilled = next((d for d in drill.list_fault_drill(fault_drill()) if d.record_id == record_id), None)
        retries = operations.delayed_retries_of(queue_operations(), record_id)
    except QueueUnavailable as exc:
        log.warning("console record %d: drill and retries unavailable: %s", record_id, exc)
        return InThePipeline(unreadable=True)
    return InThePipeline(drilled, retries)


@bp.get("/records/<int:record_id>")
def record(record_id: int) -> str:
    detail = admin_record_detail(new_uow(), record_id)
    # A record has a few dozen events in its whole life: the first page of the largest size.
    events = event_store.list_record_events(new_uow(), record_id, 1, event_store.MAX_PAGE_SIZE)
    return render_template(
        "console/record.html",
        record=detail,
        chart=dimensions_chart(detail.dimensions) if len(detail.dimensions) >= 3 else None,
        events=events,
        regeneratable=detail.status in {int(s) for s in REGENERATABLE} and not detail.is_deleted,
        pipeline=in_the_pipeline(record_id),
    )
