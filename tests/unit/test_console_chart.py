"""The overview's SVG chart, drawn on the server from per-minute figures (no servers)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from web.console.chart import throughput_svg

SHANGHAI = ZoneInfo("Asia/Shanghai")
SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Minute:
    minute: datetime
    processed: int
    failed: int


def hour(**counts: tuple[int, int]) -> list[Minute]:
    """60 minutes from 00:00 UTC; `m<N>=(processed, failed)` sets minute N."""
    start = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    return [Minute(start + timedelta(minutes=i), *counts.get(f"m{i}", (0, 0))) for i in range(60)]


def bars(svg: str) -> list[tuple[str, float]]:
    root = ET.fromstring(svg)
    return [(r.attrib["fill"], float(r.attrib["height"])) for r in root.iter(f"{SVG}rect")]


def test_an_empty_hour_is_an_axis_and_no_bars() -> None:
    svg = str(throughput_svg(hour(), SHANGHAI))
    assert bars(svg) == []
    assert "处理 0 个任务，失败 0 次" in svg


def test_bars_are_scaled_to_the_busiest_minute() -> None:
    svg = str(throughput_svg(hour(m3=(10, 0), m4=(5, 2)), SHANGHAI))
    heights = bars(svg)
    assert len(heights) == 3  # two processed bars, one failed; zeros draw nothing
    tallest = max(h for _, h in heights)
    assert [round(h / tallest, 2) for _, h in heights] == [1.0, 0.5, 0.2]
    assert "处理 15 个任务，失败 2 次" in svg


def test_labels_are_in_the_admin_time_zone_every_ten_minutes() -> None:
    svg = str(throughput_svg(hour(), SHANGHAI))
    labels = re.findall(r">(\d\d:\d\d)</text>", svg)
    assert labels == ["08:00", "08:10", "08:20", "08:30", "08:40", "08:50"]


def test_the_axis_counts_are_whole_numbers() -> None:
    for busiest in (1, 3, 5, 7, 40):
        svg = str(throughput_svg(hour(m0=(busiest, 0)), SHANGHAI))
        axis = re.findall(r'text-anchor="end"[^>]*>([^<]+)</text>', svg)
        assert all(label.isdigit() for label in axis), (busiest, axis)
        assert int(axis[-1]) >= busiest
