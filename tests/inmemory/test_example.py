"""examples/train_and_evaluate.py, shortened: it trains, evaluates in process, and perplexity falls."""

from __future__ import annotations

import os

import pytest

from examples import train_and_evaluate

pytestmark = pytest.mark.slow


def test_train_and_evaluate_short(tmp_path, capsys):
    out = tmp_path / "plot.png"
    history = train_and_evaluate.main(
        ["--steps", "40", "--eval_every", "20", "--limit", "4", "--max_gen_toks", "4",
         "--width", "64", "--out", str(out), "--tensorboard", str(tmp_path / "tb"),
         "--results_dir", str(tmp_path / "runs")]
    )  # fmt: skip
    assert history["step"] == [0, 20, 40]
    assert history["ppl"][-1] < 0.5 * history["ppl"][0]  # training shows in the evaluation
    assert os.path.getsize(out) > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert printed.count("|demo_wikitext|") == 3 and "word_perplexity" in printed
    assert history["scalars"][0]["eval/demo_arc_easy/acc_norm"] == history["arc"][0]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    _report_of_the_saved_evaluations(tmp_path)


def _report_of_the_saved_evaluations(tmp_path):
    from jaxeval.report import load_runs, render_report

    runs = load_runs([str(tmp_path / "runs")])
    assert [r.step for r in runs] == [0, 20, 40] and {r.series for r in runs} == {
        "train_and_evaluate"
    }
    assert all(set(r.samples) == set(train_and_evaluate.TASKS) for r in runs)
    html = render_report(runs)
    assert "Across training steps" in html and "demo_arc_easy · acc_norm" in html
