"""A radar (spider) chart as inline SVG, drawn on the server: no chart library at run time.

Pure: no Flask, no I/O; the report page and the admin console embed what `radar_svg`
returns. Axis i points at angle -90° + 360°·i/n (the first one straight up, then
clockwise); a value v sits at distance `RADIUS`·v/max_value from the centre, so a reader
of the SVG (or a test) recovers the values from the polygon's points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

#: The drawing's coordinate system: the chart centred in a viewBox wide enough for the
#: labels left and right of it (four Chinese characters at `FONT_SIZE`), and small enough
#: that on a phone (about 330 px for the chart) the labels stay readable (about 12 px).
WIDTH, HEIGHT = 480, 440
CENTER_X, CENTER_Y = WIDTH / 2, HEIGHT / 2
RADIUS = 135.0
FONT_SIZE = 18
#: Labels sit this far beyond the outer ring.
LABEL_GAP = 20.0
#: Grid rings, as fractions of the maximum.
RINGS = (0.2, 0.4, 0.6, 0.8, 1.0)
#: Coordinates are written with this many decimals.
PRECISION = 2


def axis_point(index: int, count: int, fraction: float) -> tuple[float, float]:
    """Where `fraction` (0..1) of the way out along axis `index` of `count` lies."""
    angle = -math.pi / 2 + 2 * math.pi * index / count
    return (
        round(CENTER_X + RADIUS * fraction * math.cos(angle), PRECISION),
        round(CENTER_Y + RADIUS * fraction * math.sin(angle), PRECISION),
    )


def _points(pairs: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:g},{y:g}" for x, y in pairs)


def _anchor(x: float) -> str:
    if abs(x - CENTER_X) < 1:
        return "middle"
    return "start" if x > CENTER_X else "end"


def radar_svg(labels: Sequence[str], values: Sequence[float], max_value: float, *, title: str = "") -> Markup:
    """An accessible SVG radar chart of `values` (0..max_value) on axes named `labels`.

    Raises ValueError for fewer than three axes, mismatched lengths, a non-positive or
    non-finite maximum, or a value outside 0..max_value: a chart must never draw a
    misleading shape in silence.
    """
    count = len(labels)
    if count < 3:
        raise ValueError(f"a radar chart needs at least 3 axes, got {count}")
    if len(values) != count:
        raise ValueError(f"{count} labels but {len(values)} values")
    if not (math.isfinite(max_value) and max_value > 0):
        raise ValueError(f"max_value must be a positive number, got {max_value!r}")
    for label, value in zip(labels, values, strict=True):
        if not (math.isfinite(value) and 0 <= value <= max_value):
            raise ValueError(f"value of {label!r} must be within 0..{max_value:g}, got {value!r}")

    described = "，".join(f"{label} {value:g}" for label, value in zip(labels, values, strict=True))
    name = title or "雷达图"
    parts = [
        f'<svg class="radar" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(name)}：{escape(described)}">',
        f"<title>{escape(name)}</title>",
        '<g class="radar-grid" fill="none" stroke="#d0d5dd" stroke-width="1">',
    ]
    for ring in RINGS:
        ring_points = [axis_point(i, count, ring) for i in range(count)]
        parts.append(f'<polygon points="{_points(ring_points)}"/>')
    for i in range(count):
        x, y = axis_point(i, count, 1.0)
        parts.append(f'<line x1="{CENTER_X:g}" y1="{CENTER_Y:g}" x2="{x:g}" y2="{y:g}"/>')
    parts.append("</g>")

    value_points = [axis_point(i, count, value / max_value) for i, value in enumerate(values)]
    parts.append(
        f'<polygon class="radar-values" points="{_points(value_points)}" '
        'fill="rgba(37, 99, 235, 0.25)" stroke="#2563eb" stroke-width="2.5" stroke-linejoin="round"/>'
    )
    parts.append('<g class="radar-dots" fill="#2563eb">')
    parts.extend(f'<circle cx="{x:g}" cy="{y:g}" r="3.5"/>' for x, y in value_points)
    parts.append("</g>")

    parts.append(f'<g class="radar-labels" font-size="{FONT_SIZE}" fill="#1f2937">')
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        angle = -math.pi / 2 + 2 * math.pi * i / count
        x = round(CENTER_X + (RADIUS + LABEL_GAP) * math.cos(angle), PRECISION)
        # The label's two lines (name, score) are centred on the axis's end, beyond the ring.
        y = round(CENTER_Y + (RADIUS + LABEL_GAP) * math.sin(angle) - FONT_SIZE / 4, PRECISION)
        anchor = _anchor(x)
        parts.append(
            f'<text x="{x:g}" y="{y:g}" text-anchor="{anchor}">{escape(label)}'
            f'<tspan class="radar-score" x="{x:g}" dy="{FONT_SIZE + 2}" fill="#2563eb" font-weight="600">'
            f"{value:g}</tspan>"
            "</text>"
        )
    parts.append("</g></svg>")
    # Every text interpolated above went through escape(); the rest is numbers and constants.
    return Markup("".join(parts))  # noqa: S704
