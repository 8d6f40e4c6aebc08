"""The overview's throughput charts: SVG drawn on the server, no JavaScript library.

One group of two bars per period (processed, failed), a y axis scaled to the busiest
period, labels in the admin's time zone: every ten minutes for the last hour, every five
days for the 30-day history. Pure: figures in, markup out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Protocol

from markupsafe import Markup, escape

#: The console's content width in CSS pixels, so the chart is drawn at about 1:1.
WIDTH = 1130
HEIGHT = 220
LEFT = 44  # room for the y labels
BOTTOM = 26  # room for the x labels
TOP = 12
RIGHT = 8
PROCESSED_COLOUR = "#2f6fdf"
FAILED_COLOUR = "#d9453b"
#: An x label every this many minutes.
LABEL_EVERY = 10


class MinutePoint(Protocol):
    """What the chart reads of one minute's figures (ops' `MinuteFigures` has these)."""

    @property
    def minute(self) -> datetime: ...
    @property
    def processed(self) -> int: ...
    @property
    def failed(self) -> int: ...


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 × 10^k that is >= value (a round top for the axis)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def minute_label(index: int, local: datetime) -> str | None:
    return f"{local:%H:%M}" if local.minute % LABEL_EVERY == 0 else None


def day_label(index: int, local: datetime) -> str | None:
    return f"{local:%m-%d}" if index % 5 == 0 else None


@dataclass(frozen=True)
class DayPoint:
    minute: datetime  # the day's start (aware, the admin's zone)
    processed: int
    failed: int


def by_day(hours: Sequence[MinutePoint], tz: tzinfo, days: int, today: date) -> list[DayPoint]:
    """Hourly figures summed per day of the admin's zone: the last `days` days up to `today`."""
    first = today - timedelta(days=days - 1)
    sums: dict[date, list[int]] = {first + timedelta(days=i): [0, 0] for i in range(days)}
    for point in hours:
        day = point.minute.astimezone(tz).date()
        if day in sums:
            sums[day][0] += point.processed
            sums[day][1] += point.failed
    return [DayPoint(datetime.combine(d, time.min, tzinfo=tz), p, f) for d, (p, f) in sums.items()]


def throughput_svg(
    points: Sequence[MinutePoint],
    tz: tzinfo,
    *,
    period: str = "最近一小时",
    label: Callable[[int, datetime], str | None] = minute_label,
) -> Markup:
    """An accessible SVG (title and a text summary) of processed and failed jobs per period."""
    total_processed = sum(p.processed for p in points)
    total_failed = sum(p.failed for p in points)
    title = f"{period}：处理 {total_processed} 个任务，失败 {total_failed} 次"
    top = _nice_ceiling(max([1, *(max(p.processed, p.failed) for p in points)]))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(points))
    bar = max(1.0, slot / 2 - 0.5)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    # Counts are whole: a middle line only where it falls on one (top 2, 10, 20 ...; not 1 or 5).
    fractions = (0, 0.5, 1) if top % 2 == 0 else (0, 1)
    for fraction in fractions:
        y = TOP + plot_h * (1 - fraction)
        value_label = str(int(top * fraction))
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e3e6ec" />'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#5b6472">{value_label}</text>'
        )
    for i, point in enumerate(points):
        x = LEFT + i * slot
        local = point.minute.astimezone(tz)
        when = f"{local:%H:%M}" if label is minute_label else f"{local:%Y-%m-%d}"
        for offset, value, colour, name in (
            (0.0, point.processed, PROCESSED_COLOUR, "处理"),
            (bar, point.failed, FAILED_COLOUR, "失败"),
        ):
            if value <= 0:
                continue
            h = plot_h * value / top
            parts.append(
                f'<rect x="{x + offset:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{when} {name} {value}</title></rect>'
            )
        tick = label(i, local)
        if tick is not None:
            parts.append(
                f'<text x="{x + slot / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11" '
                f'fill="#5b6472">{escape(tick)}</text>'
            )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" stroke="#9aa3b2" />'
    )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - built from numbers and escaped text only
