"""A training loop's logger: the flat names, TensorBoard event files read back by TensorBoard's
own reader, and a W&B offline run read back from its transaction log."""

from __future__ import annotations

import json

import pytest

from jaxeval.trackers import TensorBoardLogger, WandbStepLogger, flatten_results
from tests.helpers.wandb_offline import read_offline_run
from tests.report.runs import RUNS


@pytest.fixture(scope="module")
def results() -> dict:
    (file,) = (RUNS / "jaxeval").rglob("results_*.json")
    return json.loads(file.read_text())


def test_docstring_example():
    results = {
        "results": {
            "arc_easy": {"alias": "arc_easy", "acc,none": 0.5, "acc_stderr,none": 0.05},
            "gsm8k": {"exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": "N/A"},
        }
    }
    assert flatten_results(results) == {
        "eval/arc_easy/acc": 0.5,
        "eval/arc_easy/acc_stderr": 0.05,
        "eval/gsm8k/exact_match/strict-match": 0.25,
    }


def test_every_metric_of_a_run(results):
    flat = flatten_results(results, prefix="")
    expected = {
        f"{task}/{key.replace(',none', '').replace(',', '/')}": value
        for task, entry in results["results"].items()
        for key, value in entry.items()
        if "," in key
    }
    assert flat == expected and len(flat) == 8
    assert flat["gsm8k/exact_match_stderr/flexible-extract"] > 0


def test_tensorboard_event_files(results, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(str(tmp_path / "tb"))
    for step in (0, 100, 200):
        logger.log_results(results, step=step)
    logger.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(flatten_results(results))
    scalars = events.Scalars("eval/arc_easy/acc")
    assert [s.step for s in scalars] == [0, 100, 200]
    assert [s.value for s in scalars] == pytest.approx(
        [results["results"]["arc_easy"]["acc,none"]] * 3
    )


def test_wandb_per_step(results, wandb_offline):
    logger = WandbStepLogger(project="training", name="steps")
    logger.log_results(results, step=10)
    logger.log_results(results, step=20)
    logger.close()
    run = read_offline_run(wandb_offline)
    acc = results["results"]["arc_easy"]["acc,none"]
    assert run.history[10]["eval/arc_easy/acc"] == acc == run.history[20]["eval/arc_easy/acc"]
    assert set(flatten_results(results)) <= set(run.history[20])
