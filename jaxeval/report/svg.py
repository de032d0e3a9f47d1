"""Inline SVG charts for the report: no script, no fonts or images to fetch.

    bar_chart("acc", [Bar("run A", 0.62, 0.03, "#0072b2"), Bar("run B", 0.58, 0.03, "#e69f00")])
        two bars from 0, each with a ±stderr whisker and its value written above it
    line_chart("acc", [Line("run", "#0072b2", [(0, 0.25, 0.04), (1000, 0.41, 0.05)])])
        one line per training run, a point per step with its ±stderr whisker

Every mark carries a <title> (shown on hover) with the exact numbers; the classes (`bar`, `err`,
`point`) let a test count the marks.
"""

from __future__ import annotations

import dataclasses
import math
from html import escape

# Okabe-Ito: told apart with every common colour-vision deficiency.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")


@dataclasses.dataclass(frozen=True)
class Bar:
    label: str
    value: float
    stderr: float | None
    color: str


@dataclasses.dataclass(frozen=True)
class Line:
    label: str
    color: str
    points: list[tuple[float, float, float | None]]  # (step, value, stderr)


def fmt(value: float) -> str:
    """Four significant digits, never an exponent below a million: 0.6234, 12.35, 3.28e+07."""
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values covering [lo, hi]: (0, 0.73) -> [0, 0.2, 0.4, 0.6, 0.8]."""
    if not hi > lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value < hi + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _axes(ticks: list[float], y_of, left: float, right: float) -> list[str]:
    out = []
    for tick in ticks:
        y = y_of(tick)
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" class="tick">{fmt(tick)}</text>'
        )
    return out


def _whisker(x: float, y_lo: float, y_hi: float, tip: str) -> str:
    return (
        f'<g class="err"><title>{escape(tip)}</title>'
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y_lo:.1f}" y2="{y_hi:.1f}"/>'
        f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y_lo:.1f}" y2="{y_lo:.1f}"/>'
        f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y_hi:.1f}" y2="{y_hi:.1f}"/></g>'
    )


def bar_chart(title: str, bars: list[Bar], *, width: int = 280, height: int = 180) -> str:
    left, right, top, bottom = 48, width - 8, 26, height - 14
    spans = [(b.value - (b.stderr or 0), b.value + (b.stderr or 0)) for b in bars]
    low, high = min(0.0, *(s[0] for s in spans)), max(0.0, *(s[1] for s in spans))
    ticks = nice_ticks(low, high + 0.12 * (high - low))  # room for the values written on top
    lo, hi = ticks[0], ticks[-1]

    def y_of(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    parts = [
        f'<svg class="chart bar-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-bars="{len(bars)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="{width / 2}" y="15" text-anchor="middle" class="chart-title">{escape(title)}</text>',
        *_axes(ticks, y_of, left, right),
    ]
    slot = (right - left) / max(1, len(bars))
    for i, bar in enumerate(bars):
        x = left + slot * (i + 0.15)
        w = slot * 0.7
        y0, y1 = y_of(0.0), y_of(bar.value)
        err = f" ± {fmt(bar.stderr)}" if bar.stderr is not None else ""
        tip = f"{bar.label}: {fmt(bar.value)}{err}"
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{min(y0, y1):.1f}" width="{w:.1f}" '
            f'height="{max(abs(y0 - y1), 0.5):.1f}" fill="{bar.color}" data-value="{bar.value!r}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        if bar.stderr:
            parts.append(
                _whisker(x + w / 2, y_of(bar.value - bar.stderr), y_of(bar.value + bar.stderr), tip)
            )
        label_y = min(y1, y_of(bar.value + (bar.stderr or 0))) - 3
        parts.append(
            f'<text x="{x + w / 2:.1f}" y="{max(label_y, top - 1):.1f}" text-anchor="middle" '
            f'class="value">{fmt(bar.value)}</text>'
        )
    parts.append(
        f'<line x1="{left}" x2="{right}" y1="{y_of(lo):.1f}" y2="{y_of(lo):.1f}" class="axis"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def line_chart(title: str, lines: list[Line], *, width: int = 420, height: int = 230) -> str:
    left, right, top, bottom = 52, width - 12, 26, height - 34
    xs = [p[0] for line in lines for p in line.points]
    ys = [
        v for line in lines for p in line.points for v in (p[1] - (p[2] or 0), p[1] + (p[2] or 0))
    ]
    x_lo, x_hi = min(xs), max(xs)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    ticks = nice_ticks(min(ys), max(ys))
    lo, hi = ticks[0], ticks[-1]

    def x_of(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (right - left)

    def y_of(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    parts = [
        f'<svg class="chart line-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-lines="{len(lines)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="{width / 2}" y="15" text-anchor="middle" class="chart-title">{escape(title)}</text>',
        *_axes(ticks, y_of, left, right),
    ]
    for step in sorted(set(xs)):
        parts.append(
            f'<text x="{x_of(step):.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">'
            f"{fmt(step)}</text>"
        )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{height - 4}" text-anchor="middle" class="tick">step</text>'
    )
    for line in lines:
        points = sorted(line.points)
        path = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y, _ in points)
        parts.append(
            f'<polyline class="curve" points="{path}" fill="none" stroke="{line.color}" '
            f'stroke-width="2"><title>{escape(line.label)}</title></polyline>'
        )
        for x, y, err in points:
            tip = f"{line.label}, step {fmt(x)}: {fmt(y)}" + (f" ± {fmt(err)}" if err else "")
            if err:
                parts.append(_whisker(x_of(x), y_of(y - err), y_of(y + err), tip))
            parts.append(
                f'<circle class="point" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="3.5" '
                f'fill="{line.color}"><title>{escape(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)
