"""Delayed retries: the report jobs waiting out their retry schedule; retry one now, or delete it.

Rows are named by the entry's unique hex prefix; the outcome of each is shown after the
action, as for dead letters. Both actions call the service functions the admin API and
the CLI call (services/usecases/operations.py), audited as the signed-in admin.
"""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from services.usecases import operations
from web.console.acting import actor
from web.console.blueprint import bp
from web.console.deadletters import MSG_NOTHING_SELECTED, PAGE_SIZE, outcomes_page, page_number, selected
from web.deps import audit_log, new_uow, queue_operations


@bp.get("/delayed")
def delayed_retries() -> str:
    page = page_number()
    retries = operations.list_delayed_retries(
        new_uow(), queue_operations(), offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE
    )
    return render_template("console/delayed.html", retries=retries, page=page, page_size=PAGE_SIZE)


@bp.post("/delayed/retry")
def retry_delayed() -> ResponseReturnValue:
    everything = request.form.get("all") == "1"
    handles = None if everything else selected()
    if handles == []:
        flash(MSG_NOTHING_SELECTED, "error")
        return redirect(url_for("console.delayed_retries"))
    items = operations.retry_delayed_now(queue_operations(), audit_log(), actor(), handles)
    return outcomes_page("立即重试结果", items, "重试", "console.delayed_retries")


@bp.post("/delayed/delete")
def delete_delayed() -> ResponseReturnValue:
    handles = selected()
    if not handles:
        flash(MSG_NOTHING_SELECTED, "error")
        return redirect(url_for("console.delayed_retries"))
    items = operations.delete_delayed_retries(new_uow(), queue_operations(), audit_log(), actor(), handles)
    return outcomes_page("删除重试结果", items, "重试", "console.delayed_retries")
