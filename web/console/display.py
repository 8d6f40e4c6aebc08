"""How the console shows times and durations: in the admin's time zone, in Chinese."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from services.config import Settings


def admin_timezone(settings: Settings) -> tzinfo:
    """The zone dates are shown and typed in (ADMIN_TIMEZONE, default Asia/Shanghai; checked
    when the settings are read)."""
    return settings.admin_zone


def local_time(value: datetime | None, tz: tzinfo) -> str:
    """``2026-12-01 08:30:05`` in `tz`; a naive value is UTC (the database's); "—" for none."""
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo("UTC"))
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


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
