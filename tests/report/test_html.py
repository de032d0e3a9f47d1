"""The report page: self-contained, the numbers of the results files, one chart per metric,
curves for checkpoints, and `jaxeval report` on the command line."""

from __future__ import annotations

import json
import re

import pytest

from jaxeval.cli import main
from jaxeval.report import compare_runs, load_runs, render_report


@pytest.fixture
def checkpoints(copy_run, jaxeval_dir):
    """Three checkpoints of one training run (in-memory steps 0, 100, 200), acc rising."""
    paths = []
    for step, acc in ((0, 0.25), (100, 0.4), (200, 0.55)):
        folder, results = copy_run(jaxeval_dir, f"step{step}")
        data = json.loads(results.read_text())
        data["config"]["in_memory"] = {"name": "my-run", "step": step}
        data["results"]["arc_easy"]["acc,none"] = acc
        results.write_text(json.dumps(data))
        paths.append(str(folder))
    return paths


def test_the_page_is_self_contained(lm_eval_dir, jaxeval_b_dir):
    runs = load_runs([str(lm_eval_dir), str(jaxeval_b_dir)])
    html = render_report(runs)
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 4  # 4 metric rows
    assert not re.search(r"<(img|link|iframe)\b", html)  # nothing to fetch
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)
    assert "<pre id='report-errors' hidden></pre>" in html and "data-report-ready" in html


def test_tables_hold_the_results_files_values(lm_eval_dir, jaxeval_b_dir):
    runs = load_runs([str(lm_eval_dir), str(jaxeval_b_dir)])
    html = render_report(runs, max_flips=3)
    for run in runs:
        for task, entry in run.results["results"].items():
            for key, value in entry.items():
                if "," in key and isinstance(value, float):
                    assert f"{value:.4f}" in html, (run.label, task, key)
    c = compare_runs(*runs)
    shown = sum(min(len(f), 3) for f in c.flips.values())
    assert html.count("class='flip'") == shown
    assert html.count("more not shown (--max_flips)") == sum(len(f) > 3 for f in c.flips.values())


def test_curves_for_checkpoints(checkpoints):
    runs = load_runs(checkpoints)
    assert [r.step for r in runs] == [0, 100, 200] and {r.series for r in runs} == {"my-run"}
    html = render_report(runs)
    assert "Across training steps" in html
    curve = re.search(r'<svg class="chart line-chart"[^>]*>.*?</svg>', html).group(0)
    assert curve.count('class="point"') == 3 and "arc_easy · acc" in curve


def test_command_line(lm_eval_dir, jaxeval_b_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "report.html"
    assert main(["report", str(lm_eval_dir), str(jaxeval_b_dir), "-o", str(out)]) == 0
    assert f"Report written to {out} (2 run(s), 2 task(s))" in capsys.readouterr().out
    assert out.read_text().count("<svg") == 4
    assert main(["report", str(tmp_path / "missing"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no such file or folder" in err and str(tmp_path / "missing") in err
    assert main(["report", str(lm_eval_dir), "--baseline", "3", "-o", str(out)]) == 2
    assert "--baseline 3 is not a run index" in capsys.readouterr().err
    assert main(["report", str(lm_eval_dir), "-o", str(out)]) == 0  # one run: no comparison
    assert "(1 run(s), 2 task(s))" in capsys.readouterr().out
    assert "class='comparison'" not in out.read_text() and out.read_text().count("<svg") == 4
