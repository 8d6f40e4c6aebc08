"""How the console shows what the services and processes say: times and durations in the
admin's time zone, events, actors and audit entries, in Chinese words."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from config.settings import Settings
from services.domain.limits import is_strict_int


def admin_timezone(settings: Settings) -> tzinfo:
    """The zone dates are shown and typed in (ADMIN_TIMEZONE, default Asia/Shanghai; checked
    when the settings are read)."""
    return settings.admin_zone


#: Shown for a time that cannot be shown in the admin's zone (a stored date at the edge of
#: the calendar, year 1 or 9999, which the zone's offset would carry beyond it).
UNREADABLE_TIME = "（无法显示的时间）"
#: The days an admin may type in a filter: the zone's offset keeps their bounds within the calendar.
FIRST_DAY = date(1, 1, 2)
LAST_DAY = date(9999, 12, 30)


def local_time(value: datetime | None, tz: tzinfo) -> str:
    """``2026-12-01 08:30:05`` in `tz`; a naive value is UTC (the database's); "—" for none."""
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo("UTC"))
    try:
        return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError):
        return UNREADABLE_TIME


def parse_day(text: str) -> date | None:
    """A day typed as 2026-12-01, within FIRST_DAY..LAST_DAY; None for anything else."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return None
    return day if FIRST_DAY <= day <= LAST_DAY else None


def duration(seconds: float | None) -> str:
    """A short Chinese duration: ``42 秒``, ``3 分 5 秒``, ``2 小时 4 分``."""
    if seconds is None:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} 秒"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} 分 {secs} 秒"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} 小时 {minutes} 分"


def day_start(day: date, tz: tzinfo) -> datetime:
    """Midnight of `day` in `tz`, aware (a date typed by the admin means their day)."""
    return datetime.combine(day, time.min, tzinfo=tz)


def day_after(day: date, tz: tzinfo) -> datetime:
    """Midnight after `day` in `tz`: the exclusive end of a range that includes `day`."""
    return day_start(day + timedelta(days=1), tz)


#: What a process says it is doing (its heartbeat, observability/heartbeat.py), in words.
_DOING_WORDS = {
    "idle": "空闲",
    "stopped": "已停止",
    "unknown": "未知",
    "reconciling": "对账中",
    "flushing answers": "写入作答",
    "flushing progress": "写入进度",
    "consuming events": "写入事件日志",
    "retention": "清理过期数据",
}
_SERVING = re.compile(r"serving (\d+) connection\(s\)")
_JOB = re.compile(r"(report|regenerate_matching) (\S+)")


def doing_words(doing: str) -> str:
    """`report 42, report 43` → `生成报告：记录 42、43`; `serving 3 connection(s)` → `处理 3 个连接`;
    anything unknown as it is."""
    if doing in _DOING_WORDS:
        return _DOING_WORDS[doing]
    serving = _SERVING.fullmatch(doing)
    if serving:
        return f"处理 {serving.group(1)} 个连接"
    parts = [p.strip() for p in doing.split(",")]
    jobs = [_JOB.fullmatch(p) for p in parts]
    if parts and all(jobs):
        reports = [m.group(2) for m in jobs if m and m.group(1) == "report"]
        tasks = [m.group(2) for m in jobs if m and m.group(1) != "report"]
        words = []
        if reports:
            words.append(f"生成报告：记录 {'、'.join(reports)}")
        if tasks:
            words.append(f"后台任务 {'、'.join(t[:8] for t in tasks)}")
        return "；".join(words)
    return ", ".join(_DOING_WORDS.get(p, p) for p in parts)


def value_words(value: object) -> str:
    """An event's data value in words: 是/否 for booleans, — for none, lists joined."""
    if value is True:
        return "是"
    if value is False:
        return "否"
    if value is None:
        return "—"
    if isinstance(value, list | tuple):
        return "、".join(value_words(v) for v in value)
    if isinstance(value, dict):
        return "，".join(f"{k}：{value_words(v)}" for k, v in value.items())
    return str(value)


#: The counters of an audit entry's detail (services/usecases/operations.py, admin.py), in words.
_COUNT_WORDS = {
    "regenerated": "重新生成",
    "requeued": "重新入队",
    "retried": "立即重试",
    "deleted": "删除",
    "skipped": "跳过",
    "purged": "清空",
    "stopped": "结束",
    "matched": "匹配",
}
_COUNT = re.compile(r"(\d+) (" + "|".join(_COUNT_WORDS) + r")")
_FILTER_WORDS = {
    "status": "状态",
    "submittedFrom": "提交时间从",
    "submittedTo": "提交时间到",
    "userId": "用户",
}


def audit_detail_words(detail: str | None, tz: tzinfo) -> str:
    """An audit entry's detail (written in English by the services, for logs and the API) in
    words: `all; 2 requeued, 0 skipped` → `全部；重新入队 2 项，跳过 0 项`. Unknown parts stay."""
    if not detail:
        return ""
    words = []
    for part in detail.split("; "):
        if part == "all":
            words.append("全部")
        elif part == "queue unavailable":
            words.append("队列不可用（Redis）")
        elif part.startswith("records set to status 5: "):
            words.append(
                "记录置为“生成失败”：" + part.removeprefix("records set to status 5: ").replace("none", "无")
            )
        elif part.startswith("status="):
            words.append(" ".join(_filter_words(item, tz) for item in part.split(" ")))
        elif " min, until " in part:
            minutes, until = part.split(" min, until ", 1)
            words.append(f"{minutes} 分钟，至 {_time_words(until, tz)}")
        else:
            words.append(
                _COUNT.sub(lambda m: f"{_COUNT_WORDS[m.group(2)]} {m.group(1)} 项", part).replace(", ", "，")
            )
    return "；".join(words)


def _time_words(text: str, tz: tzinfo) -> str:
    try:
        return local_time(datetime.fromisoformat(text), tz)
    except ValueError:
        return text


def _filter_words(item: str, tz: tzinfo) -> str:
    name, _, value = item.partition("=")
    if name in ("submittedFrom", "submittedTo"):
        value = _time_words(value, tz)
    return f"{_FILTER_WORDS.get(name, name)} {value}"


#: Why the reconciler queued a job (its events' `reason`), in words.
REASON_WORDS = {"no job alive in Redis": "Redis 中没有该记录的任务"}


def _yes_no(yes: str, no: str) -> Callable[[object], str | None]:
    return lambda value: yes if value is True else no if value is False else None


def _count(template: str) -> Callable[[object], str | None]:
    return lambda value: template.format(value) if is_strict_int(value) else None


#: What each field of an event's data says (services and actors write them; the timeline
#: reads them), as a sentence of its own; None leaves the field out (no value to tell).
_EVENT_FACTS: dict[str, Callable[[object], str | None]] = {
    "attempt": _count("第 {} 次尝试"),
    "retries": _count("已重试 {} 次"),
    "lostDeliveries": _count("随 worker 丢失 {} 次，不再重试"),
    "statusSet": _yes_no("记录已置为“生成失败”", "记录状态留给它仍在进行的任务（或对账）决定"),
    "batch": _yes_no("批量操作", "单条操作"),
    "deadLetter": _yes_no("从死信队列重新入队", "不在死信队列中"),
    "requested": _count("本批共 {} 条"),
    "enqueued": _yes_no("已加入生成队列", "未能加入生成队列（Redis 不可用），由对账补发"),
    "reason": lambda value: REASON_WORDS.get(value, str(value)) if isinstance(value, str) else None,
    "questionIds": lambda value: f"题目 {value_words(value)}" if value else None,
    "answeredCount": _count("已答 {} 题"),
    "task": lambda value: f"后台任务 {str(value)[:8]}" if value else None,
    "messageIds": lambda value: f"删除的延迟重试 {value_words(value)}" if value else None,
}
#: Fields shown apart (the failure's reason has a line of its own).
_SHOWN_APART = frozenset({"error"})


def event_facts(data: Mapping[str, object]) -> list[str]:
    """An event's data as sentences, in a stable order: `{"attempt": 2, "statusSet": True}` →
    `["第 2 次尝试", "记录已置为“生成失败”"]`. A field the console has no words for yet is
    shown with its name, never dropped."""
    facts = []
    for key in sorted(data):
        if key in _SHOWN_APART:
            continue
        say = _EVENT_FACTS.get(key)
        fact = say(data[key]) if say is not None else f"其他（{key}）：{value_words(data[key])}"
        if fact:
            facts.append(fact)
    return facts


#: Who did it, for the processes the event log names by kind.
_ACTOR_KINDS = {"worker": "报告生成 worker", "reconciler": "对账 reconciler"}
_ACTOR_PREFIXES = {
    "user:": "用户 ",
    "admin:": "管理接口 · ",
    "console:": "管理后台 · ",
    "cli:": "命令行 · ",
}


def actor_words(actor: str | None) -> str:
    """`console:张三` → `管理后台 · 张三`, `admin:1a2b…` → `管理接口 · 1a2b…` (the token's
    fingerprint), `user:7` → `用户 7`, `worker` → `报告生成 worker`; anything else as it is."""
    if not actor:
        return ""
    if actor in _ACTOR_KINDS:
        return _ACTOR_KINDS[actor]
    for prefix, words in _ACTOR_PREFIXES.items():
        if actor.startswith(prefix):
            return words + actor.removeprefix(prefix)
    return actor


def credential_words(credential: str | None) -> str:
    """An audit entry's credential: `admin-token 1a2b…` → `管理员凭证 1a2b…`, `shell root@host` →
    `命令行 root@host`."""
    if not credential:
        return "—"
    for prefix, words in (("admin-token ", "管理员凭证 "), ("shell ", "命令行 ")):
        if credential.startswith(prefix):
            return words + credential.removeprefix(prefix)
    return credential


def until_words(when: datetime | None, now: datetime) -> str:
    """How long until `when`: `3 分 5 秒后`, or `已到期` once it passed."""
    if when is None:
        return "—"
    left = (when - now).total_seconds()
    return "已到期，即将执行" if left <= 0 else f"{duration(left)}后"


#: JSON's names for the types Python's decoder gives (a quarantined payload's reason).
_JSON_TYPES = {
    "list": "数组",
    "str": "字符串",
    "int": "数字",
    "float": "数字",
    "bool": "布尔值",
    "NoneType": "null",
}


def invalid_reason_words(reason: str) -> str:
    """Why a report job cannot be decoded (redis_adapters/report_message.py says it in
    English), in words: `missing field(s) RetryCount` → `缺少字段 RetryCount`."""
    if reason.startswith("not JSON: nested too deeply"):
        return "不是合法的 JSON（括号嵌套过深）"
    if reason.startswith("not JSON"):
        return "不是合法的 JSON"
    if reason.startswith("not a JSON object but "):
        kind = reason.removeprefix("not a JSON object but ")
        return f"不是 JSON 对象，而是{_JSON_TYPES.get(kind, kind)}"
    if reason.startswith("missing field(s) "):
        return "缺少字段 " + "、".join(reason.removeprefix("missing field(s) ").split(", "))
    for field, words in (
        ("RecordId", "不是 1 到 2^63-1 之间的整数"),
        ("RetryCount", "不是大于等于 0 的整数"),
        ("EnqueueTime", "不是 ISO-8601 格式的时间"),
    ):
        if reason.startswith(f"{field} "):
            return f"{field} {words}"
    return reason
