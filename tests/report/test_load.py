"""Runs read back from lm-eval's and jaxeval's files, and bad input as one clear error."""

from __future__ import annotations

import json

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.report.load import load_runs, step_of


def test_reads_lm_eval_files(lm_eval_dir):
    (run,) = load_runs([str(lm_eval_dir)])
    assert run.engine == "lm-eval" and run.model == "fake-model" and run.label == "fake-model"
    assert run.tasks == ["arc_easy", "gsm8k"]
    assert run.output_type("arc_easy") == "multiple_choice"
    arc, gsm = run.samples["arc_easy"], run.samples["gsm8k"]
    assert len(arc) == 20 and len(gsm) == 40  # gsm8k: one row per document and filter
    assert set(arc[0]["values"]) == {"acc", "acc_norm"} and "doc" not in arc[0]
    acc = sum(r["values"]["acc"] for r in arc) / len(arc)
    assert acc == pytest.approx(run.results["results"]["arc_easy"]["acc,none"])


def test_a_folder_of_runs_and_labels(lm_eval_dir, jaxeval_dir, jaxeval_b_dir):
    runs = load_runs([str(lm_eval_dir.parent)])
    assert sorted(r.label for r in runs) == [
        "fake-model (jaxeval)",
        "fake-model (lm-eval)",
        "fake-model-b",
    ]
    runs = load_runs([str(jaxeval_dir), str(jaxeval_b_dir)], ["base", "other"])
    assert [r.label for r in runs] == ["base", "other"] and runs[0].engine == "jaxeval"
    with pytest.raises(JaxevalError, match="1 --label values for 2 runs"):
        load_runs([str(jaxeval_dir), str(jaxeval_b_dir)], ["only-one"])


@pytest.mark.parametrize(
    "results, step",
    [
        ({"config": {"in_memory": {"name": "run7", "step": 300}}}, (300, "run7")),
        (
            {
                "model_name": "EleutherAI/pythia-160m",
                "config": {"model_args": "pretrained=EleutherAI/pythia-160m,revision=step1000"},
            },
            (1000, "EleutherAI/pythia-160m"),
        ),
        (
            {"model_name": "/ckpt/run1/checkpoint-500", "config": {"model_args": "x"}},
            (500, "/ckpt/run1"),
        ),
        (
            {"model_name": "org/model", "config": {"model_args": "pretrained=org/model"}},
            (None, "org/model"),
        ),
    ],
)
def test_step_of(results, step):
    assert step_of(results) == step


def test_missing_path_names_it(tmp_path):
    with pytest.raises(JaxevalError, match="no such file or folder") as err:
        load_runs([str(tmp_path / "nowhere")])
    assert str(tmp_path / "nowhere") in str(err.value) and "What to do" in str(err.value)


def test_folder_without_results(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(JaxevalError, match="no results_.*json file in this folder"):
        load_runs([str(tmp_path)])


def test_samples_file_named_directly(lm_eval_dir):
    (samples, *_) = sorted(lm_eval_dir.rglob("samples_*.jsonl"))
    with pytest.raises(JaxevalError, match="not a results file") as err:
        load_runs([str(samples)])
    assert str(samples) in str(err.value)


def test_malformed_results_json(copy_run, lm_eval_dir):
    _, results = copy_run(lm_eval_dir, "cut")
    results.write_text(results.read_text()[:500])
    with pytest.raises(JaxevalError, match=r"not valid JSON \(line \d+") as err:
        load_runs([str(results)])
    assert str(results) in str(err.value)
    results.write_text(json.dumps({"versions": {}}))
    with pytest.raises(JaxevalError, match='no "results" object'):
        load_runs([str(results)])


def test_malformed_samples_line(copy_run, lm_eval_dir):
    folder, _ = copy_run(lm_eval_dir, "bad_samples")
    (samples,) = folder.rglob("samples_gsm8k_*.jsonl")
    lines = samples.read_text().splitlines()
    lines[2] = lines[2][:40]
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(JaxevalError, match="line 3 is not valid JSON") as err:
        load_runs([str(folder)])
    assert str(samples) in str(err.value)
