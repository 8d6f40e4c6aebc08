"""web/radar.py: the SVG is well formed, its polygon is the values, bad input is refused."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.radar import CENTER_X, CENTER_Y, RADIUS, radar_svg

SVG = "{http://www.w3.org/2000/svg}"
LABELS = ["语言", "逻辑数学", "空间", "身体运动", "音乐", "人际", "内省", "自然观察"]


def polygon_values(svg: str, count: int, max_value: float) -> list[float]:
    """Read the values back from the polygon: distance from the centre, scaled."""
    root = ET.fromstring(svg)
    (polygon,) = [p for p in root.iter(f"{SVG}polygon") if p.get("class") == "radar-values"]
    points = [tuple(map(float, pair.split(","))) for pair in (polygon.get("points") or "").split()]
    assert len(points) == count
    values = []
    for i, (x, y) in enumerate(points):
        distance = math.hypot(x - CENTER_X, y - CENTER_Y)
        if distance > 1:  # closer in, the 0.01 rounding of coordinates blurs the angle
            # Each point lies on its own axis: -90° + 360°·i/n.
            angle = math.atan2(y - CENTER_Y, x - CENTER_X)
            expected = -math.pi / 2 + 2 * math.pi * i / count
            assert math.isclose(math.cos(angle - expected), 1.0, abs_tol=1e-3), i
        values.append(distance / RADIUS * max_value)
    return values


def test_the_polygon_is_the_scores() -> None:
    scores = [95.0, 60.0, 60.0, 55.0, 50.0, 45.0, 45.0, 0.0]
    svg = str(radar_svg(LABELS, scores, 100.0, title="多元智能雷达图"))
    assert polygon_values(svg, 8, 100.0) == pytest.approx(scores, abs=0.01)
    root = ET.fromstring(svg)
    assert root.get("role") == "img"
    assert "语言 95" in (root.get("aria-label") or "")
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert texts == [f"{label}{score:g}" for label, score in zip(LABELS, scores, strict=True)]


@given(
    st.integers(min_value=3, max_value=12).flatmap(
        lambda n: st.lists(st.floats(min_value=0, max_value=100), min_size=n, max_size=n)
    )
)
def test_any_values_round_trip(values: list[float]) -> None:
    labels = [f"d{i}" for i in range(len(values))]
    svg = str(radar_svg(labels, values, 100.0))
    assert polygon_values(svg, len(values), 100.0) == pytest.approx(values, abs=0.01)


def test_labels_are_escaped() -> None:
    svg = str(radar_svg(["<b>", "a&b", '"q"'], [1, 2, 3], 5))
    root = ET.fromstring(svg)
    assert ["".join(t.itertext()) for t in root.iter(f"{SVG}text")] == ["<b>1", "a&b2", '"q"3']
    assert "<b>" not in svg


@pytest.mark.parametrize(
    ("labels", "values", "max_value", "message"),
    [
        (["a", "b"], [1, 2], 5, "at least 3 axes"),
        (["a", "b", "c"], [1, 2], 5, "3 labels but 2 values"),
        (["a", "b", "c"], [1, 2, 3], 0, "positive"),
        (["a", "b", "c"], [1, 2, 3], math.inf, "positive"),
        (["a", "b", "c"], [1, 2, 6], 5, "'c' must be within 0..5"),
        (["a", "b", "c"], [1, -0.5, 3], 5, "'b' must be within"),
        (["a", "b", "c"], [1, math.nan, 3], 5, "'b' must be within"),
    ],
)
def test_bad_input_is_refused(labels: list[str], values: list[float], max_value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        radar_svg(labels, values, max_value)
