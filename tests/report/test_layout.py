"""The report on real-sized inputs, measured in headless Chromium at 1280 px: a sweep of seven
checkpoints with long absolute paths, and two runs that differ only in n-shot. The page is never
wider than the window, no two texts of a chart overlap, the labels say what differs."""

from __future__ import annotations

import html
import re

from jaxeval.report import load_runs, write_report
from tests.report.layout import measure
from tests.report.synthetic import STEPS, SWEEP_ROOT, write_n_shot_pair, write_sweep

LOG = {"perplexity", "word_perplexity", "byte_perplexity"}


def _scales(page: str) -> dict[str, str]:
    """Each bar chart's title (without " · log scale") -> its data-scale."""
    charts = re.findall(
        r'<svg class="chart bar-chart"[^>]*data-scale="(\w+)"[^>]*><title>([^<]*)</title>', page
    )
    return {title.removesuffix(" · log scale"): scale for scale, title in charts}


def test_a_sweep_of_seven_checkpoints_fits_the_window(tmp_path):
    write_sweep(tmp_path / "runs")
    runs = load_runs([str(tmp_path / "runs")])
    assert [r.step for r in runs] == list(STEPS)  # checkpoint-2000 before checkpoint-16000
    assert [r.label for r in runs] == [f"checkpoint-{s}" for s in STEPS]
    assert all(len(r.model) > 130 for r in runs)  # long paths, never wrapped before
    page = write_report(runs, tmp_path / "report.html", max_flips=2)
    layout = measure(page, tmp_path, width=1280)
    assert layout["window_width"] == 1280
    assert layout["body_width"] <= layout["window_width"], layout["body_width"]
    assert layout["page_width"] <= layout["window_width"], layout["page_width"]
    assert layout["charts"] == 14 and layout["overlaps"] == [], layout["overlaps"]
    assert layout["values"] >= 40  # seven bars a chart: most values are written
    scales = _scales(page.read_text())
    assert scales == {m: "log" if m in LOG else "linear" for m in scales} and LOG <= set(scales)
    dom = layout["dom"]
    for step in STEPS:  # the whole path on hover
        assert f'title="{html.escape(SWEEP_ROOT)}/checkpoint-{step}"' in dom


def test_runs_that_differ_only_in_n_shot(tmp_path):
    write_n_shot_pair(tmp_path / "runs")
    runs = load_runs([str(tmp_path / "runs")])
    assert [r.label for r in runs] == [
        "HuggingFaceTB/SmolLM2-135M · 0-shot",
        "HuggingFaceTB/SmolLM2-135M · 5-shot",
    ]
    page = write_report(runs, tmp_path / "report.html")
    layout = measure(page, tmp_path, width=1280)
    assert layout["body_width"] <= layout["window_width"] == 1280
    assert layout["overlaps"] == [] and layout["charts"] == 7
    legend = re.search(r'<p class="legend">(.*?)</p>', layout["dom"]).group(1)
    shown = [re.sub(r"<[^>]+>", "", s) for s in re.findall(r"<span>(.*?)</span>", legend)]
    assert shown == [r.label for r in runs]


def test_the_committed_runs_fit_too(lm_eval_dir, jaxeval_dir, jaxeval_b_dir, tmp_path):
    runs = load_runs([str(lm_eval_dir), str(jaxeval_dir), str(jaxeval_b_dir)])
    layout = measure(write_report(runs, tmp_path / "report.html"), tmp_path, width=1280)
    assert layout["body_width"] <= layout["window_width"] and layout["overlaps"] == []
    assert layout["values"] == layout["charts"] * 3


def test_the_measure_can_fail(tmp_path):
    """A chart with two texts on one spot and a block wider than the window are both seen."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><body style='margin:0'><div style='width:2000px'>wide</div>"
        '<svg class="chart" width="200" height="100"><title>bad</title>'
        '<text x="10" y="20">0.6234</text><text x="20" y="22">0.5811</text>'
        '<text x="120" y="20">apart</text></svg></body></html>'
    )
    layout = measure(page, tmp_path, width=1280)
    assert layout["body_width"] == 2000 and layout["window_width"] == 1280
    assert layout["overlaps"] == [["bad", "0.6234", "0.5811"]]
