"""How the console shows times and durations: in the admin's time zone, in Chinese."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from services.config import Settings


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
