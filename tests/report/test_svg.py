"""Chart axes and labels: log axes for perplexities, values written only where they fit, step
labels that never touch (the browser check is tests/report/test_layout.py)."""

from __future__ import annotations

import re

import pytest

from jaxeval.report.axes import linear_scale, log_scale, log_ticks, text_width
from jaxeval.report.svg import (
    PALETTE,
    VALUE_SIZE,
    Bar,
    Line,
    _step_labels,
    bar_chart,
    fmt,
    line_chart,
    value_label,
)


def test_axes_docstring_examples():
    assert linear_scale(0.0, 0.73, top=26, bottom=166).ticks == (0, 0.2, 0.4, 0.6, 0.8)
    assert log_scale(3.2, 2400.0, top=26, bottom=166).ticks == (1, 10, 100, 1000, 10000)
    assert log_scale(1.6, 2.4, top=26, bottom=166).ticks == (1, 2, 5)
    assert log_scale(32.6, 51.6, top=26, bottom=166).ticks == (10, 20, 50, 100)


def test_log_ticks_at_most_seven():
    ticks = log_ticks(0.5, 3.4e12)
    assert len(ticks) <= 7 and ticks[0] <= 0.5 and ticks[-1] >= 3.4e12
    assert ticks == [0.1, 100.0, 1e5, 1e8, 1e11, 1e14]  # every third decade


@pytest.mark.parametrize("log", [False, True])
def test_headroom_is_kept(log):
    make = log_scale if log else linear_scale
    for high in (0.98, 1.0, 7.3, 26154.0):
        scale = make(0.5, high, top=26, bottom=166, headroom=6)
        assert scale.y(high) - scale.top >= 6 and scale.lo <= 0.5


def test_value_labels_shorten_then_drop():
    assert [value_label(0.6234, w) for w in (40, 34, 27, 12)] == ["0.6234", "0.623", "0.62", None]
    assert [value_label(26154.18, w) for w in (40, 30, 22)] == ["26154", "26.2k", "26k"]
    assert fmt(26154.18) == "26154" and fmt(3405358.9) == "3.41e+06"


def _bars(values):
    return [Bar(f"run {i}", v, None, PALETTE[i % 8]) for i, v in enumerate(values)]


def _values_and_slot(svg: str) -> tuple[list[str], float]:
    width = int(re.search(r'width="(\d+)"', svg).group(1))
    bars = int(re.search(r'data-bars="(\d+)"', svg).group(1))
    return re.findall(r'class="value">([^<]*)<', svg), (width - 8 - 48) / bars


def test_values_are_written_only_where_they_fit():
    seven = bar_chart("acc", _bars([0.0833, 0.1667, 0.25, 0.3333, 0.4167, 0.5417, 0.7083]))
    values, slot = _values_and_slot(seven)
    assert values == ["0.0833", "0.1667", "0.25", "0.3333", "0.4167", "0.5417", "0.7083"]
    assert all(text_width(v, VALUE_SIZE) <= slot - 2 for v in values)
    many = bar_chart("acc", _bars([0.61 + i / 1000 for i in range(40)]))
    values, slot = _values_and_slot(many)
    assert slot < 30 and values and all(len(v) <= 4 for v in values)  # two digits: 0.61
    crowded = bar_chart("acc", _bars([0.61 + i / 1000 for i in range(100)]))
    assert _values_and_slot(crowded)[0] == []  # not even two digits fit: none (<title> has them)


def test_perplexities_on_a_log_axis():
    svg = bar_chart("perplexity", _bars([26154.2, 372.5, 49.1, 8.31]), log=True)
    assert 'data-scale="log"' in svg and ">perplexity · log scale<" in svg
    ys = [float(y) for y in re.findall(r'<rect class="bar" x="[^"]*" y="([^"]*)"', svg)]
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]*height="([^"]*)"', svg)]
    assert min(heights) > 20  # no bar flattened by the largest one
    assert ys == sorted(ys)  # the tallest first
    linear = bar_chart("perplexity", _bars([26154.2, 372.5, 49.1, 8.31]))
    assert min(float(h) for h in re.findall(r'<rect class="bar"[^>]*height="([^"]*)"', linear)) < 1
    assert 'data-scale="linear"' in bar_chart("x", _bars([1.0, -0.5]), log=True)  # not all > 0


def test_step_labels_never_touch():
    steps = [1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0, 64000.0]
    svg = line_chart("acc", [Line("run", PALETTE[0], [(s, 0.5, None) for s in steps])])
    shown = re.findall(r'<text x="[^"]*" y="212" text-anchor="middle" class="tick">([^<]*)<', svg)
    assert shown[0] == "1000" and shown[-1] == "64k" and "2000" not in shown
    kept = _step_labels(steps, lambda s: 52 + s / 64000 * 340)
    boxes = [(x - text_width(t, 10) / 2, x + text_width(t, 10) / 2) for x, t in kept]
    assert all(a[1] < b[0] for a, b in zip(boxes, boxes[1:]))
