"""Value axes for the report's charts (linear or log), and how wide a label will be drawn.

    linear_scale(0.0, 0.73, top=26, bottom=166)  ticks 0, 0.2, 0.4, 0.6, 0.8 (0 at y=166)
    log_scale(3.2, 2400.0, top=26, bottom=166)   ticks 1, 10, 100, 1000, 10000: one decade each
    log_scale(1.6, 2.4, top=26, bottom=166)      ticks 1, 2, 5 (within two decades: 1-2-5 steps)
    log_scale(32.6, 51.6, top=26, bottom=166)    ticks 10, 20, 50, 100 (from a power of ten)

`headroom` asks for that many pixels between the highest value and the top of the axis (room
for a value written above a bar). `text_width` is an upper bound of a label's width in pixels:
DejaVu Sans's advance widths (the widest of the common sans-serif fonts, Chromium's default on
Linux), so a label that fits by this measure fits in the browser.
"""

from __future__ import annotations

import dataclasses
import math

# DejaVu Sans advance widths, in ems; letters not listed take their case's widest common width.
_EM = {
    **dict.fromkeys("0123456789", 0.637),
    **dict.fromkeys(".,:;|!'il", 0.318),
    **dict.fromkeys("-()[]", 0.39),
    **dict.fromkeys("+=±<>~×", 0.838),
    " ": 0.318,
    "/": 0.337,
    "_": 0.5,
    "·": 0.318,
    "…": 1.0,
    "f": 0.352,
    "j": 0.278,
    "r": 0.411,
    "t": 0.392,
    "m": 0.974,
    "w": 0.818,
}
_PADS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5)  # of the value range, tried in turn
ASCENT, DESCENT = 0.93, 0.24  # of the font size: a text's box around its baseline


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """An upper bound of `text`'s width in pixels at font `size` (module docstring)."""
    ems = sum(_EM.get(c, 0.78 if c.isupper() else 0.64) for c in text)
    return ems * size * (1.1 if bold else 1.0)


def fit_text(text: str, width: float, size: float, *, bold: bool = False) -> str:
    """`text`, cut with "…" until it is at most `width` pixels wide."""
    if text_width(text, size, bold=bold) <= width:
        return text
    while text and text_width(text + "…", size, bold=bold) > width:
        text = text[:-1]
    return text + "…" if text else ""


@dataclasses.dataclass(frozen=True)
class Scale:
    """Values lo..hi drawn from y=bottom up to y=top; below lo (a log axis) is drawn at lo."""

    lo: float
    hi: float
    ticks: tuple[float, ...]
    log: bool
    top: float
    bottom: float

    def y(self, value: float) -> float:
        if self.log:
            span = math.log10(self.hi) - math.log10(self.lo)
            f = (math.log10(max(value, self.lo)) - math.log10(self.lo)) / span
        else:
            f = (value - self.lo) / (self.hi - self.lo)
        return self.bottom - f * (self.bottom - self.top)


def _round(value: float) -> float:
    return float(f"{value:.12g}")


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values covering [lo, hi]: (0, 0.73) -> [0, 0.2, 0.4, 0.6, 0.8]."""
    if not hi > lo:
        hi = lo + (abs(lo) if lo else 1.0)
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value < hi + step * 0.999:
        ticks.append(_round(value))
        value += step
    return ticks


def log_ticks(low: float, high: float, most: int = 7) -> list[float]:
    """Ticks of a log axis covering [low, high] (both > 0), from a power of ten at or below
    `low` (a bar rises from there): 1-2-5 steps within two decades, else powers of ten, every
    d-th decade so that there are at most `most`."""
    lo_exp = math.floor(math.log10(low) + 1e-12)
    hi_exp = math.ceil(math.log10(high) - 1e-12)
    if hi_exp - lo_exp < 2:
        candidates = [_round(m * 10.0**e) for e in range(lo_exp, hi_exp + 2) for m in (1, 2, 5)]
        lo = _round(10.0**lo_exp)
        hi = min(c for c in candidates if c >= high and c > lo)
        return [c for c in candidates if lo <= c <= hi]
    hi_exp = max(hi_exp, lo_exp + 1)
    every = math.ceil((hi_exp - lo_exp) / (most - 1))
    hi_exp = lo_exp + every * math.ceil((hi_exp - lo_exp) / every)
    return [_round(10.0**e) for e in range(lo_exp, hi_exp + 1, every)]


def _room(scale: Scale, high: float) -> float:
    return scale.y(high) - scale.top


def linear_scale(
    low: float, high: float, *, top: float, bottom: float, headroom: float = 0.0
) -> Scale:
    """A linear axis from round ticks covering [low, high], `headroom` pixels above `high`."""
    span = high - low or abs(high) or 1.0
    for pad in _PADS:
        ticks = nice_ticks(low, high + pad * span)
        scale = Scale(ticks[0], ticks[-1], tuple(ticks), False, top, bottom)
        if _room(scale, high) >= headroom:
            break
    return scale


def log_scale(
    low: float, high: float, *, top: float, bottom: float, headroom: float = 0.0
) -> Scale:
    """A log axis (module docstring) covering [low, high] (both > 0), `headroom` as above."""
    decades = max(math.log10(high / low), 0.3)
    for pad in _PADS:
        ticks = log_ticks(low, high * 10 ** (pad * decades))
        scale = Scale(ticks[0], ticks[-1], tuple(ticks), True, top, bottom)
        if _room(scale, high) >= headroom:
            break
    return scale
