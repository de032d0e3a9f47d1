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
         "--width", "64", "--out", str(out)]
    )  # fmt: skip
    assert history["step"] == [0, 20, 40]
    assert history["ppl"][-1] < 0.5 * history["ppl"][0]  # training shows in the evaluation
    assert os.path.getsize(out) > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert printed.count("|demo_wikitext|") == 3 and "word_perplexity" in printed
