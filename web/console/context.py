"""What every console template can use: the signed-in admin, the navigation, time formatting."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import g

from services.events import EventType
from web.console.blueprint import bp
from web.console.display import admin_timezone, duration, local_time
from web.deps import current

#: The navigation bar: endpoint and label, in the order shown.
NAVIGATION = (
    ("console.overview", "总览"),
    ("console.records", "测评记录"),
    ("console.dead_letters", "死信队列"),
    ("console.invalid_payloads", "无效消息"),
    ("console.audit", "操作审计"),
)
#: An item's outcome of a batch action (services/opsmodel.py), in words.
OUTCOME_NAMES = {
    "regenerated": "已重新生成",
    "requeued": "已重新入队",
    "deleted": "已删除",
    "skipped": "已跳过",
}
#: An audit entry's outcome, in words.
OUTCOME_WORDS = {"ok": "成功", "partial": "部分成功", "failed": "失败", "started": "已开始（结果未记录）"}


#: The event log's types in the words of the record's timeline.
EVENT_NAMES = {
    EventType.RECORD_CREATED: "创建记录",
    EventType.RECORD_STARTED: "开始测评",
    EventType.RECORD_DELETED: "删除记录",
    EventType.ANSWERS_SAVED: "保存作答",
    EventType.ANSWERS_SUBMITTED: "提交答案",
    EventType.REPORT_GENERATED: "报告生成成功",
    EventType.REPORT_GENERATION_FAILED: "报告生成失败",
    EventType.REPORT_DEAD_LETTERED: "进入死信队列",
    EventType.REPORT_REGENERATED: "管理员重新生成",
    EventType.REPORT_REQUEUED: "对账补发任务",
    EventType.REPORT_FAILURE_RECORDED: "对账记录失败",
}


#: Fields of the events' data, in words (others are shown by their name).
EVENT_DATA_NAMES = {
    "attempt": "第几次尝试",
    "retries": "重试次数",
    "statusSet": "已置为生成失败",
    "batch": "批量",
    "requested": "请求数",
}

#: The process registry's kinds (actors/adapters/liveness.py).
PROCESS_KINDS = {
    "worker": "报告生成 worker",
    "hotpath": "热路径 hotpath",
    "reconciler": "对账 reconciler",
    "web": "Web",
}


@bp.context_processor
def console_context() -> dict[str, Any]:
    tz = admin_timezone(current().settings)

    def fmt_time(value: datetime | None) -> str:
        return local_time(value, tz)

    return {
        "admin": g.get("console_admin"),
        "navigation": NAVIGATION,
        "fmt_time": fmt_time,
        "fmt_duration": duration,
        "tz_name": str(tz),
        "process_kinds": PROCESS_KINDS,
        "event_data_names": EVENT_DATA_NAMES,
        "outcome_names": OUTCOME_NAMES,
        "outcome_words": OUTCOME_WORDS,
        "event_names": {str(k): v for k, v in EVENT_NAMES.items()},
    }
