"""What every console template can use: the signed-in admin, the navigation, time formatting."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import redis
from flask import g

from observability.pipeline_health import Alarm, PipelineHealth, read_health
from services.domain.events import EventType
from web.console.blueprint import bp
from web.console.display import (
    actor_words,
    admin_timezone,
    audit_detail_words,
    credential_words,
    doing_words,
    duration,
    event_facts,
    local_time,
    until_words,
)
from web.console.signin import signin_alarm
from web.deps import current

log = logging.getLogger(__name__)

#: The navigation bar: endpoint and label, in the order shown.
NAVIGATION = (
    ("console.overview", "总览"),
    ("console.records", "测评记录"),
    ("console.delayed_retries", "延迟重试"),
    ("console.dead_letters", "死信队列"),
    ("console.invalid_payloads", "无效消息"),
    ("console.audit", "操作审计"),
    ("console.drill_page", "故障演练"),
)
#: The alarm when the figures cannot be read at all.
REDIS_DOWN_ALARM = Alarm(
    "redis_down", "无法读取队列和进程状态（Redis 不可用）：任务无法入队，也无法生成报告。"
)
#: An item's outcome of a batch action (services/domain/opsmodel.py), in words.
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
    EventType.REPORT_RETRY_DELETED: "管理员删除延迟重试",
}


#: The process registry's kinds (observability/liveness.py).
PROCESS_KINDS = {
    "worker": "报告生成 worker",
    "hotpath": "热路径 hotpath",
    "reconciler": "对账 reconciler",
    "web": "Web 服务",
}
#: The process states (observability/liveness.py), in words.
STATE_WORDS = {"alive": "运行中", "gone": "已失联", "stopped": "已停止"}


def pipeline_health() -> PipelineHealth | None:
    """Queues, processes and alarms, read once per request (the banner and the overview
    share it); None while Redis cannot be read."""
    if "pipeline_health" not in g:
        deps = current()
        try:
            g.pipeline_health = read_health(
                deps.redis, deps.keys, oldest_job_s=deps.settings.alarm_oldest_job_s
            )
        except redis.RedisError as exc:
            log.warning("console: queue figures and processes unavailable: %s", exc)
            g.pipeline_health = None
    health: PipelineHealth | None = g.pipeline_health
    return health


def alarms() -> list[Alarm]:
    """What the banner of every signed-in page says (nothing on the sign-in page)."""
    if g.get("console_admin") is None:
        return []
    health = pipeline_health()
    if health is None:
        return [REDIS_DOWN_ALARM]
    guessing = signin_alarm()
    return health.alarms + ([guessing] if guessing else [])


@bp.context_processor
def console_context() -> dict[str, Any]:
    tz = admin_timezone(current().settings)

    def fmt_time(value: datetime | None) -> str:
        return local_time(value, tz)

    def fmt_until(value: datetime | None) -> str:
        return until_words(value, datetime.now(UTC))

    return {
        "admin": g.get("console_admin"),
        "alarms": alarms,
        "navigation": NAVIGATION,
        "fmt_time": fmt_time,
        "fmt_duration": duration,
        "tz_name": str(tz),
        "process_kinds": PROCESS_KINDS,
        "state_words": STATE_WORDS,
        "doing_words": doing_words,
        "fmt_until": fmt_until,
        "event_facts": event_facts,
        "actor_words": actor_words,
        "credential_words": credential_words,
        "audit_detail": lambda detail: audit_detail_words(detail, tz),
        "outcome_names": OUTCOME_NAMES,
        "outcome_words": OUTCOME_WORDS,
        "event_names": {str(k): v for k, v in EVENT_NAMES.items()},
    }
