"""A batch action's outcome per item, on a page of its own that the action redirects to.

POST, redirect, GET: an action (requeue or delete dead letters, retry or delete delayed
retries, delete invalid payloads, regenerate a selection) runs once, keeps its outcome with
the admin's session (web/console/sessions.py) and answers with a redirect to
/admin/outcomes/<id>. Reloading that page shows the outcome again; it never runs the action
again (a page answered by the POST itself did: one more regeneration, one more audit row).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from flask import abort, flash, redirect, render_template, session, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from services.domain.opsmodel import ItemOutcome
from web.console.blueprint import bp
from web.console.sessions import KEPT_OUTCOMES
from web.console.signin import SESSION_ID, session_store

MSG_GONE = (
    f"这次操作的结果已不在本次登录中（只保留最近 {KEPT_OUTCOMES} 次操作的结果）；操作本身已记入操作审计。"
)


def _back(target: str) -> str:
    """A page of this console to go back to (the overview for anything else)."""
    prefix = url_for("console.overview")
    return target if target.startswith(prefix) and target.isprintable() else prefix


def show_outcome(title: str, items: Sequence[ItemOutcome], id_label: str, back: str) -> WerkzeugResponse:
    """Keep the outcome of an action that has just run, and redirect to its page."""
    payload = {"title": title, "id_label": id_label, "back": _back(back), "items": [asdict(i) for i in items]}
    session_id = session.get(SESSION_ID)
    outcome_id = (
        session_store().keep_outcome(session_id, json.dumps(payload, ensure_ascii=False))
        if isinstance(session_id, str)
        else None
    )
    if outcome_id is None:  # signed out meanwhile: the counts, on the page it came from
        done = sum(1 for i in items if i.outcome != "skipped")
        flash(f"{title}：完成 {done} 项，跳过 {len(items) - done} 项", "ok")
        return redirect(_back(back))
    return redirect(url_for("console.outcome", outcome_id=outcome_id))


@bp.get("/outcomes/<outcome_id>")
def outcome(outcome_id: str) -> str:
    session_id = session.get(SESSION_ID)
    raw = None
    if isinstance(session_id, str) and outcome_id.isalnum() and len(outcome_id) <= 40:
        raw = session_store().outcome(session_id, outcome_id)
    if raw is None:
        abort(404, MSG_GONE)
    payload = json.loads(raw)
    return render_template(
        "console/outcomes.html",
        title=payload["title"],
        id_label=payload["id_label"],
        back=_back(payload["back"]),
        items=[ItemOutcome(**item) for item in payload["items"]],
    )
