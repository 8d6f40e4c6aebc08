"""Dead letters and invalid payloads: look at them, requeue, delete, purge.

Each form names entries by their handle (a digest of the entry's bytes, stable while
other entries come and go); the outcome of every handle is shown after the action, on the
page the action redirects to.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers import Response as WerkzeugResponse

from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage
from services.domain.opsmodel import InvalidPayload, ItemOutcome
from services.usecases import operations
from web.console.acting import actor
from web.console.blueprint import bp
from web.console.display import invalid_reason_words
from web.console.outcomes import show_outcome
from web.deps import audit_log, new_uow, queue_operations

PAGE_SIZE = 50
#: Most handles one form may carry (a page shows `PAGE_SIZE`).
MAX_SELECTED = 500
MSG_NOTHING_SELECTED = "请先勾选要处理的条目"
#: A quarantined payload longer than this shows its start, the rest behind a "全部" toggle.
PREVIEW_CHARS = 300


def page_number() -> int:
    try:
        return max(1, min(int(request.args.get("page", "1")), 10_000))
    except ValueError:
        return 1


def selected() -> list[str]:
    """The handle of a row's own button, else the ticked boxes."""
    one = request.form.get("one", "").strip()
    if one:
        return [one]
    return [h.strip() for h in request.form.getlist("ids")[:MAX_SELECTED] if h.strip()]


@bp.get("/dead")
def dead_letters() -> str:
    page = page_number()
    letters = operations.list_dead_letters(queue_operations(), offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    return render_template("console/dead.html", letters=letters, page=page, page_size=PAGE_SIZE)


def outcomes_page(title: str, items: Sequence[ItemOutcome], id_label: str, back: str) -> WerkzeugResponse:
    """A redirect to the page of a batch action's outcome per item, with a way back to `back`
    (an endpoint): a reload of that page repeats nothing (web/console/outcomes.py)."""
    return show_outcome(title, items, id_label, url_for(back))


@bp.post("/dead/requeue")
def requeue_dead() -> ResponseReturnValue:
    everything = request.form.get("all") == "1"
    handles = None if everything else selected()
    if handles == []:
        flash(MSG_NOTHING_SELECTED, "error")
        return redirect(url_for("console.dead_letters"))
    items = operations.requeue_dead_letters(new_uow(), queue_operations(), audit_log(), actor(), handles)
    return outcomes_page("死信重新入队结果", items, "死信", "console.dead_letters")


@bp.post("/dead/delete")
def delete_dead() -> ResponseReturnValue:
    handles = selected()
    if not handles:
        flash(MSG_NOTHING_SELECTED, "error")
        return redirect(url_for("console.dead_letters"))
    items = operations.delete_dead_letters(queue_operations(), audit_log(), actor(), handles)
    return outcomes_page("删除死信结果", items, "死信", "console.dead_letters")


def why_invalid(payload: InvalidPayload) -> str:
    """Why the worker could not read a quarantined payload: as it said when it quarantined it,
    else (an entry quarantined before the broker kept why) found again with the decoder it
    used. `raw` is the entry as shown, bytes that are not UTF-8 as \\xNN: still no JSON, as the
    bytes were not."""
    if payload.reason is not None:
        return invalid_reason_words(payload.reason)
    raw = payload.raw
    try:
        ReportQueueMessage.decode(raw.encode("utf-8", "surrogateescape"))
    except InvalidReportMessage as exc:
        return invalid_reason_words(str(exc))
    return "按现在的规则可以解析：隔离时的原因未记录（见 worker 日志）"


@bp.get("/invalid")
def invalid_payloads() -> str:
    page = page_number()
    payloads = operations.list_invalid(queue_operations(), offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    return render_template(
        "console/invalid.html",
        payloads=payloads,
        reasons={p.key: why_invalid(p) for p in payloads.items},
        page=page,
        page_size=PAGE_SIZE,
        preview_chars=PREVIEW_CHARS,
    )


@bp.post("/invalid/delete")
def delete_invalid() -> ResponseReturnValue:
    keys = selected()
    if not keys:
        flash(MSG_NOTHING_SELECTED, "error")
        return redirect(url_for("console.invalid_payloads"))
    items = operations.delete_invalid(queue_operations(), audit_log(), actor(), keys)
    return outcomes_page("删除无效消息结果", items, "无效消息", "console.invalid_payloads")


@bp.post("/invalid/purge")
def purge_invalid() -> ResponseReturnValue:
    count = operations.purge_invalid(queue_operations(), audit_log(), actor())
    flash(f"已清空无效消息队列，共删除 {count} 条", "ok")
    return redirect(url_for("console.invalid_payloads"))
