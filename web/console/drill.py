"""The fault drill: make chosen records' report generation fail for a while, to rehearse
failures (retries, dead letters) on the real pipeline; stop it. services/usecases/drill.py, audited."""

from __future__ import annotations

import re

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from services.domain.errors import ParamError
from services.usecases import drill
from web.console.acting import actor
from web.console.blueprint import bp
from web.deps import audit_log, fault_drill

MSG_NO_IDS = "请填写记录ID（多个用逗号或空格分隔）"


def _record_ids(text: str) -> list[int]:
    parts = [p for p in re.split(r"[\s,，、]+", text.strip()) if p]
    if not parts:
        raise ParamError(MSG_NO_IDS)
    if not all(p.isdigit() and len(p) <= 19 for p in parts):
        raise ParamError(f"记录ID只能是正整数：{text.strip()[:80]}")
    return [int(p) for p in parts]


@bp.get("/drill")
def drill_page() -> str:
    return render_template(
        "console/drill.html",
        drilled=drill.list_fault_drill(fault_drill()),
        default_minutes=drill.DEFAULT_DRILL_MINUTES,
        max_minutes=drill.MAX_DRILL_MINUTES,
        ids=request.args.get("ids", ""),
    )


@bp.post("/drill/start")
def drill_start() -> ResponseReturnValue:
    try:
        ids = _record_ids(request.form.get("ids", ""))
        minutes_text = request.form.get("minutes", "").strip() or str(drill.DEFAULT_DRILL_MINUTES)
        if not minutes_text.isdigit():
            raise ParamError(f"演练时长（分钟）必须是 1 到 {drill.MAX_DRILL_MINUTES} 之间的整数")
        started = drill.start_fault_drill(fault_drill(), audit_log(), actor(), ids, minutes=int(minutes_text))
    except ParamError as exc:
        flash(exc.message, "error")
        return redirect(url_for("console.drill_page", ids=request.form.get("ids", "")[:200]))
    flash(f"已开始故障演练：记录 {', '.join(str(d.record_id) for d in started)} 的报告生成将失败", "ok")
    return redirect(url_for("console.drill_page"))


@bp.post("/drill/stop")
def drill_stop() -> ResponseReturnValue:
    one = request.form.get("one", "").strip()
    ids = [int(one)] if one.isdigit() else None
    stopped = drill.stop_fault_drill(fault_drill(), audit_log(), actor(), ids)
    flash(f"已结束 {len(stopped)} 条记录的故障演练", "ok")
    return redirect(url_for("console.drill_page"))
