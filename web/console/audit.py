"""The audit trail: every admin action (console, API, CLI), filterable by who, what and when."""

from __future__ import annotations

from flask import render_template, request

from services.domain.errors import ParamError
from services.domain.events import MAX_ACTOR_LENGTH
from services.domain.limits import is_display_text
from services.usecases.audit import list_audit
from web.console.blueprint import bp
from web.console.display import admin_timezone, day_after, day_start, parse_day
from web.deps import current, new_uow

PAGE_SIZE = 50

#: The actions the services audit (services/usecases/operations.py, services/usecases/admin.py), in words.
ACTION_NAMES = {
    "regenerate": "重新生成报告",
    "batch_regenerate": "批量重新生成",
    "regenerate_matching": "按条件重新生成",
    "delete_record": "删除记录",
    "requeue": "死信重新入队",
    "delete_dead": "删除死信",
    "retry_now": "立即重试",
    "delete_delayed": "删除重试",
    "delete_invalid": "删除无效消息",
    "purge_invalid": "清空无效消息",
    "drill_start": "开始故障演练",
    "drill_stop": "结束故障演练",
    "signin": "登录管理后台",
    "signin_wrong_token": "登录失败：凭证错误",
    "signin_refused": "登录被拒绝：错误过于频繁",
}


def _label(text: str, what: str) -> str:
    """A who/what filter: text a form can carry (no NUL or control character), bounded; 400 else."""
    if text and not is_display_text(text, MAX_ACTOR_LENGTH):
        raise ParamError(f"{what}必须是不超过 {MAX_ACTOR_LENGTH} 个可显示的字符")
    return text


@bp.get("/audit")
def audit() -> str:
    tz = admin_timezone(current().settings)
    args = request.args
    who = _label(args.get("actor", "").strip(), "操作者")
    action = _label(args.get("action", "").strip(), "操作类型")
    typed_from = args.get("from", "").strip()
    typed_to = args.get("to", "").strip()
    try:
        page = max(1, min(int(args.get("page", "1")), 10_000))
    except ValueError:
        page = 1
    problems = []
    since = until = None
    if typed_from:
        day = parse_day(typed_from)
        if day is None:
            problems.append(f"开始日期“{typed_from}”无效（格式 2026-12-01），已忽略")
        else:
            since = day_start(day, tz)
    if typed_to:
        day = parse_day(typed_to)
        if day is None:
            problems.append(f"结束日期“{typed_to}”无效（格式 2026-12-01），已忽略")
        else:
            until = day_after(day, tz)
    if since and until and since >= until:
        problems.append("开始日期晚于结束日期，日期条件已忽略")
        since = until = None
    filters = {"actor": who, "action": action, "from": typed_from, "to": typed_to}
    entries = list_audit(
        new_uow(),
        actor=who or None,
        action=action or None,
        since=since,
        until=until,
        offset=(page - 1) * PAGE_SIZE,
        limit=PAGE_SIZE,
    )
    return render_template(
        "console/audit.html",
        entries=entries,
        letters=entries,
        page=page,
        page_size=PAGE_SIZE,
        filters=filters,
        pager_args={k: v for k, v in filters.items() if v},
        problems=problems,
        actions=ACTION_NAMES,
    )
