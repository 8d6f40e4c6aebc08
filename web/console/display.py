"""How the console shows times and durations: in the admin's time zone, in Chinese."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from config.settings import Settings


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
