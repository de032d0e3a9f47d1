"""Inline SVG charts for the report: no script, no fonts or images to fetch.

    bar_chart("acc", [Bar("run A", 0.62, 0.03, "#0072b2"), Bar("run B", 0.58, 0.03, "#e69f00")])
        two bars from 0, each with a ±stderr whisker and its value written above it
    bar_chart("perplexity", bars, log=True)
        a log axis (axes.py); the bars rise from its lowest tick
    line_chart("acc", [Line("run", "#0072b2", [(0, 0.25, 0.04), (1000, 0.41, 0.05)])])
        one line per training run, a point per step with its ±stderr whisker

A chart is 44 pixels wider per bar (280 to 1200). A value is written above its bar only where it
fits: in the bar's slot, in four significant digits, else three, else two, else not at all (its
<title> still has it); step labels under a line chart that would touch the previous one are left
out. No two texts of a chart overlap (tests/report/test_layout.py measures them in Chromium).
Every mark carries a <title> (shown on hover) with the exact numbers; the classes (`bar`, `err`,
`point`, `value`) let a test count the marks; `data-scale` says "linear" or "log".
"""

from __future__ import annotations

import dataclasses
import math
from html import escape

from jaxeval.report.axes import (
    ASCENT,
    DESCENT,
    Scale,
    fit_text,
    linear_scale,
    log_scale,
    text_width,
)

# Okabe-Ito: told apart with every common colour-vision deficiency.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
TITLE_Y, TITLE_SIZE = 15, 12  # the chart title's baseline and font size (assets.CSS)
VALUE_SIZE, TICK_SIZE = 10, 10  # the values above bars, the ticks
LABEL_GAP = 3  # pixels between a bar's top (or its whisker's) and its value


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
    """Four significant digits, never an exponent below a million: 0.6234, 12.35, 26154,
    3.28e+07."""
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    if abs(value) >= 1e4:
        return f"{value:.0f}"
    return f"{value:.4g}"


def si(value: float, digits: int = 3) -> str:
    """Thousands and up with a unit: 26154 -> 26.2k, 3405358 -> 3.41M; below, fmt."""
    for power, unit in ((12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(value) >= 10**power:
            return f"{value / 10**power:.{digits}g}{unit}"
    return fmt(value)


def value_label(value: float, width: float, size: float = VALUE_SIZE) -> str | None:
    """`value` in at most `width` pixels: fmt's four significant digits, else three, else two
    (thousands and up as 26.2k, 3.41M); None when even two do not fit."""
    small = abs(value) < 1e3
    shorter = [f"{value:.3g}", f"{value:.2g}"] if small else [si(value, 3), si(value, 2)]
    for text in (fmt(value), *shorter):
        if text_width(text, size) <= width:
            return text
    return None


def step_label(step: float) -> str:
    """A training step under a line chart: 900, 12.5k, 1.2M."""
    if step == int(step) and abs(step) < 1e4:
        return str(int(step))
    if abs(step) < 1e6:
        return f"{step / 1e3:.4g}k"
    return f"{step / 1e6:.4g}M"


def chart_width(bars: int) -> int:
    return min(max(280, 56 + 44 * bars), 1200)


def _axes(scale: Scale, left: float, right: float) -> list[str]:
    out = []
    for tick in scale.ticks:
        y = scale.y(tick)
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" class="tick">'
            f"{si(tick) if scale.log else fmt(tick)}</text>"
        )
    return out


def _whisker(x: float, y_lo: float, y_hi: float, tip: str) -> str:
    return (
        f'<g class="err"><title>{escape(tip)}</title>'
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y_lo:.1f}" y2="{y_hi:.1f}"/>'
        f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y_lo:.1f}" y2="{y_lo:.1f}"/>'
        f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y_hi:.1f}" y2="{y_hi:.1f}"/></g>'
    )


def _head(kind: str, title: str, scale: Scale, width: int, height: int, count: str) -> list[str]:
    shown = title + (" · log scale" if scale.log else "")
    return [
        f'<svg class="chart {kind}" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {count} data-scale="{"log" if scale.log else "linear"}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(shown)}</title>",
        f'<text x="{width / 2}" y="{TITLE_Y}" text-anchor="middle" class="chart-title">'
        f"{escape(fit_text(shown, width - 8, TITLE_SIZE, bold=True))}</text>",
    ]


def bar_chart(
    title: str, bars: list[Bar], *, log: bool = False, width: int | None = None, height: int = 180
) -> str:
    """One bar per run (module docstring); `log` is ignored when a value is not above 0."""
    width = width or chart_width(len(bars))
    left, right, top, bottom = 48, width - 8, 26, height - 14
    title_bottom = TITLE_Y + TITLE_SIZE * DESCENT + LABEL_GAP  # and a gap under the title
    headroom = title_bottom + 1 - top + VALUE_SIZE * ASCENT + LABEL_GAP
    log = log and all(b.value > 0 for b in bars)
    if log:
        lows = [b.value - (b.stderr or 0) for b in bars]
        low = min(min(b.value for b in bars) * 0.98, *(v for v in lows if v > 0))
        high = max(b.value + (b.stderr or 0) for b in bars)
        scale = log_scale(low, high, top=top, bottom=bottom, headroom=headroom)
    else:
        spans = [(b.value - (b.stderr or 0), b.value + (b.stderr or 0)) for b in bars]
        low, high = min(0.0, *(s[0] for s in spans)), max(0.0, *(s[1] for s in spans))
        scale = linear_scale(low, high, top=top, bottom=bottom, headroom=headroom)
    parts = [
        *_head("bar-chart", title, scale, width, height, f'data-bars="{len(bars)}"'),
        *_axes(scale, left, right),
    ]
    slot = (right - left) / max(1, len(bars))
    base = scale.y(scale.lo if log else 0.0)
    for i, bar in enumerate(bars):
        x = left + slot * (i + 0.15)
        w = slot * 0.7
        y1 = scale.y(bar.value)
        err = f" ± {fmt(bar.stderr)}" if bar.stderr is not None else ""
        tip = f"{bar.label}: {fmt(bar.value)}{err}"
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{min(base, y1):.1f}" width="{w:.1f}" '
            f'height="{max(abs(base - y1), 0.5):.1f}" fill="{bar.color}" data-value="{bar.value!r}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        if bar.stderr:
            y_lo, y_hi = scale.y(bar.value - bar.stderr), scale.y(bar.value + bar.stderr)
            parts.append(_whisker(x + w / 2, y_lo, y_hi, tip))
        label = value_label(bar.value, slot - 2)
        label_y = min(y1, base, scale.y(bar.value + (bar.stderr or 0))) - LABEL_GAP
        if label is not None and label_y - VALUE_SIZE * ASCENT > title_bottom:
            parts.append(
                f'<text x="{x + w / 2:.1f}" y="{label_y:.1f}" text-anchor="middle" '
                f'class="value">{label}</text>'
            )
    parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" class="axis"/>')
    parts.append("</svg>")
    return "".join(parts)


def _step_labels(steps: list[float], x_of, gap: float = 6.0) -> list[tuple[float, str]]:
    """(x, text) of the step labels that do not touch the one kept before them."""
    kept: list[tuple[float, str]] = []
    last_right = -math.inf
    for step in steps:
        text = step_label(step)
        half = text_width(text, TICK_SIZE) / 2
        x = x_of(step)
        if x - half >= last_right + gap:
            kept.append((x, text))
            last_right = x + half
    return kept


def line_chart(
    title: str, lines: list[Line], *, log: bool = False, width: int = 420, height: int = 230
) -> str:
    """Metric against step, one line per training run; `log` as in bar_chart."""
    xs = sorted({p[0] for line in lines for p in line.points})
    last_half = text_width(step_label(xs[-1]), TICK_SIZE) / 2
    left, right, top, bottom = 52, width - max(12, math.ceil(last_half) + 2), 26, height - 34
    values = [p[1] for line in lines for p in line.points]
    ys = [
        v for line in lines for p in line.points for v in (p[1] - (p[2] or 0), p[1] + (p[2] or 0))
    ]
    log = log and all(v > 0 for v in values)
    if log:
        scale = log_scale(min(v for v in ys if v > 0), max(ys), top=top, bottom=bottom)
    else:
        scale = linear_scale(min(ys), max(ys), top=top, bottom=bottom)
    x_lo, x_hi = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1

    def x_of(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (right - left)

    parts = [
        *_head("line-chart", title, scale, width, height, f'data-lines="{len(lines)}"'),
        *_axes(scale, left, right),
    ]
    for x, text in _step_labels(xs, x_of):
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">{text}</text>'
        )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{height - 4}" text-anchor="middle" class="tick">step</text>'
    )
    for line in lines:
        points = sorted(line.points)
        path = " ".join(f"{x_of(x):.1f},{scale.y(y):.1f}" for x, y, _ in points)
        parts.append(
            f'<polyline class="curve" points="{path}" fill="none" stroke="{line.color}" '
            f'stroke-width="2"><title>{escape(line.label)}</title></polyline>'
        )
        for x, y, err in points:
            tip = f"{line.label}, step {fmt(x)}: {fmt(y)}" + (f" ± {fmt(err)}" if err else "")
            if err:
                parts.append(_whisker(x_of(x), scale.y(y - err), scale.y(y + err), tip))
            parts.append(
                f'<circle class="point" cx="{x_of(x):.1f}" cy="{scale.y(y):.1f}" r="3.5" '
                f'fill="{line.color}"><title>{escape(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)
