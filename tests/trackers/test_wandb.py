"""`--wandb_args`: lm-eval's names (its WandbLogger is the oracle), and a real offline W&B run of
`jaxeval run`, read back from the run's own transaction log."""

from __future__ import annotations

import json
import sys

import pytest

from jaxeval.cli import main
from jaxeval.errors import JaxevalError
from jaxeval.trackers.wandb import RESULT_COLUMNS, load_wandb, results_table_rows, wandb_metrics
from tests.helpers.wandb_offline import read_offline_run
from tests.report.runs import RUNS


@pytest.fixture(scope="module")
def lm_eval_results() -> dict:
    (file,) = (RUNS / "lm_eval").rglob("results_*.json")
    return json.loads(file.read_text())


def _lm_eval_logger(results: dict):
    from lm_eval.loggers import WandbLogger

    class Recorder:  # stands in for the W&B run: lm-eval hands it what it would log
        logged: list = []

        def log(self, data, step=None):
            self.logged.append((data, step))

    logger = WandbLogger.__new__(WandbLogger)  # no wandb.init: only its formatting is used
    logger.run, logger.step = Recorder(), None
    logger.post_init(results)
    return logger


def test_metric_names_are_lm_evals(lm_eval_results):
    summary, metrics = _lm_eval_logger(lm_eval_results)._sanitize_results_dict()
    assert wandb_metrics(lm_eval_results) == (summary, metrics)
    assert metrics["arc_easy/acc"] == lm_eval_results["results"]["arc_easy"]["acc,none"]
    assert "gsm8k/exact_match,strict-match" in metrics and summary["arc_easy/alias"] == "arc_easy"


def test_results_table_is_lm_evals(lm_eval_results):
    logger = _lm_eval_logger(lm_eval_results)
    logger._log_results_as_table()
    ((logged, _),) = logger.run.logged
    table = logged["evaluation/eval_results"]
    assert table.columns == ["Tasks", *RESULT_COLUMNS]
    theirs = [row for row in table.data if row[4] not in ("name", "sample_len")]
    assert results_table_rows(lm_eval_results) == theirs and len(theirs) == 4


def test_cli_logs_an_offline_run(wandb_offline, fake_model, data_root, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        ["run", "--model", "fake", "--model_args", "pretrained=/models/fake-llm",
         "--tasks", "arc_easy", "--limit", "10", "--data_dir", str(data_root),
         "--bootstrap_iters", "100", "--output_path", str(out), "--log_samples",
         "--wandb_args", "project=jaxeval-tests,name=cli-run", "step=7",
         "--wandb_config_args", "lr=0.1"]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    (results_file,) = out.rglob("results_*.json")
    saved = json.loads(results_file.read_text())["results"]["arc_easy"]
    run = read_offline_run(wandb_offline)
    assert run.config["lr"] == 0.1 and run.config["cli_configs"]["model"] == "fake"
    assert run.config["task_configs"]["arc_easy"]["output_type"] == "multiple_choice"
    assert run.history[7]["arc_easy/acc"] == saved["acc,none"]
    assert run.history[7]["arc_easy/acc_norm_stderr"] == saved["acc_norm_stderr,none"]
    assert run.summary["arc_easy/alias"] == "arc_easy"
    table = run.table("evaluation/eval_results", step=7)
    assert table["columns"] == ["Tasks", *RESULT_COLUMNS]
    assert [row[4] for row in table["data"]] == ["acc", "acc_norm"]
    samples = run.table("arc_easy_eval_results", step=7)
    assert samples["columns"][:3] == ["id", "data", "choices"]
    assert {"raw_predictions", "filtered_predictions", "acc", "acc_norm", "filter"} <= set(
        samples["columns"]
    )
    assert len(samples["data"]) == 10
    acc = samples["columns"].index("acc")
    assert sum(r[acc] for r in samples["data"]) / 10 == pytest.approx(saved["acc,none"])
    assert run.artifacts["results"] == {"type": "eval_results", "files": ["results.json"]}
    assert run.artifacts["arc_easy"] == {
        "type": "samples_by_task",
        "files": ["arc_easy_eval_samples.json"],
    }
    assert len(fake_model) == 1


def test_bad_wandb_args_fail_before_the_model_loads(wandb_offline, fake_model, capsys):
    rc = main(["run", "--model", "fake", "--tasks", "arc_easy", "--wandb_args", "projct=x"])
    err = capsys.readouterr().err
    assert rc == 2 and "wandb.init(projct=...) failed" in err and "wandb_args" in err
    assert fake_model == []
    rc = main(["run", "--model", "fake", "--tasks", "arc_easy", "--wandb_config_args", "a=1"])
    assert (
        rc == 2 and "--wandb_config_args is used only with --wandb_args" in capsys.readouterr().err
    )


def test_an_unreachable_wandb_server_fails_at_once(wandb_offline, monkeypatch):
    """Online, with a well-formed key and no server: named in seconds, before `wandb.init`
    (which would wait out its 90 s init_timeout)."""
    import socket
    import time

    import wandb

    from jaxeval.trackers.wandb import WandbTracker

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    monkeypatch.delenv("WANDB_MODE")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)

    def never(**kwargs):
        raise AssertionError("wandb.init was reached")

    monkeypatch.setattr(wandb, "init", never)
    start = time.monotonic()
    with pytest.raises(JaxevalError, match="cannot be reached") as err:
        WandbTracker({"project": "p"}, {})
    assert time.monotonic() - start < 10
    assert err.value.field == "wandb_args" and "WANDB_MODE=offline" in str(err.value)


def test_without_wandb_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(JaxevalError, match=r'pip install "jaxeval\[wandb\]"'):
        load_wandb()
