"""The overview's throughput charts: SVG drawn on the server, no JavaScript library.

One group of two bars per period (processed, failed), a y axis scaled to the busiest
period, labels in the admin's time zone: every ten minutes for the last hour, every five
days for the 30-day history. Pure: figures in, markup out.

The chart is as wide as its box at any width, the whole period in view: a phone at 390 px
shows the last hour and the last days too (a chart drawn 1,130 px wide and scrolled in its
box showed a phone only its oldest minutes, which looked empty). The y labels are an SVG of
fixed width beside the plot; the plot's bars are drawn in a nested SVG whose viewBox is
stretched to the plot's width (one unit per period) and height (one unit per job), and its
x labels are placed in percent of that width, so text keeps its size while bars stretch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Protocol

from markupsafe import Markup, escape

#: Height of a chart, in CSS pixels; its width is its box's.
HEIGHT = 220
LEFT = 44  # width of the y labels
BOTTOM = 26  # room for the x labels
TOP = 12
#: Share of a period's slot each of its two bars takes.
BAR = 0.45
PROCESSED_COLOUR = "#2f6fdf"
FAILED_COLOUR = "#d9453b"
SVG_NS = "http://www.w3.org/2000/svg"
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
    """An accessible chart (its summary as the figure's label) of processed and failed jobs per
    period: the y labels and the plot, two SVGs side by side in a `div.chart`."""
    total_processed = sum(p.processed for p in points)
    total_failed = sum(p.failed for p in points)
    title = f"{period}：处理 {total_processed} 个任务，失败 {total_failed} 次"
    top = _nice_ceiling(max([1, *(max(p.processed, p.failed) for p in points)]))
    plot_h = HEIGHT - TOP - BOTTOM
    slots = max(1, len(points))
    axis = [f'<svg class="chart-axis" width="{LEFT}" height="{HEIGHT}" xmlns="{SVG_NS}" aria-hidden="true">']
    plot = [f'<svg class="chart-plot" width="100%" height="{HEIGHT}" xmlns="{SVG_NS}" aria-hidden="true">']
    # Counts are whole: a middle line only where it falls on one (top 2, 10, 20 ...; not 1 or 5).
    fractions = (0, 0.5, 1) if top % 2 == 0 else (0, 1)
    for fraction in fractions:
        y = TOP + plot_h * (1 - fraction)
        axis.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#5b6472">{int(top * fraction)}</text>'
        )
        plot.append(f'<line x1="0" y1="{y:.1f}" x2="100%" y2="{y:.1f}" stroke="#e3e6ec" />')
    bars = [
        f'<svg x="0" y="{TOP}" width="100%" height="{plot_h}" viewBox="0 0 {slots} {top}" '
        'preserveAspectRatio="none">'
    ]
    ticks = []
    for i, point in enumerate(points):
        local = point.minute.astimezone(tz)
        when = f"{local:%H:%M}" if label is minute_label else f"{local:%Y-%m-%d}"
        for offset, value, colour, name in (
            (0.05, point.processed, PROCESSED_COLOUR, "处理"),
            (0.05 + BAR, point.failed, FAILED_COLOUR, "失败"),
        ):
            if value <= 0:
                continue
            bars.append(
                f'<rect x="{i + offset:.2f}" y="{top - value}" width="{BAR}" height="{value}" '
                f'fill="{colour}"><title>{when} {name} {value}</title></rect>'
            )
        tick = label(i, local)
        if tick is not None:
            ticks.append(
                f'<text x="{(i + 0.5) * 100 / slots:.2f}%" y="{HEIGHT - 8}" text-anchor="middle" '
                f'font-size="11" fill="#5b6472">{escape(tick)}</text>'
            )
    bars.append("</svg>")
    plot += bars + ticks
    plot.append(f'<line x1="0" y1="{TOP + plot_h}" x2="100%" y2="{TOP + plot_h}" stroke="#9aa3b2" />')
    plot.append("</svg>")
    axis.append("</svg>")
    return Markup(  # noqa: S704 - built from numbers and escaped text only
        f'<div class="chart" role="img" aria-label="{escape(title)}" title="{escape(title)}">'
        + "".join(axis)
        + "".join(plot)
        + "</div>"
    )
