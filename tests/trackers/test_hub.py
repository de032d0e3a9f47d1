"""`--hf_hub_log_args`: lm-eval's keys and repository names (its EvaluationTracker is the oracle),
the exact upload plan, and a clear error before the model loads when the Hub cannot be used."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from jaxeval.cli import main
from jaxeval.errors import JaxevalError
from jaxeval.trackers import HubLogArgs, check_hub_access, merge_dict_args, plan_hub_upload
from jaxeval.trackers.hub_card import card_configs, dataset_card


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"public_repo": True},
        {"details_repo_name": "evals"},
        {"details_repo_name": "details", "results_repo_name": "scores", "public_repo": True},
        {"hub_repo_name": "both", "details_repo_name": "ignored"},
    ],
)
def test_repository_names_are_lm_evals(given):
    from lm_eval.loggers import EvaluationTracker

    theirs = EvaluationTracker(hub_results_org="my-org", **given)  # no token: nothing is pushed
    details, results = HubLogArgs(hub_results_org="my-org", **given).repo_ids("my-org")
    if given.get("public_repo"):
        assert (details, results) == (theirs.details_repo, theirs.results_repo)
    else:
        assert (details, results) == (theirs.details_repo_private, theirs.results_repo_private)


def test_keys_parse_from_the_command_line():
    words = [
        "hub_results_org=my-org,details_repo_name=evals",
        "push_samples_to_hub=True,gated=True",
    ]
    args = HubLogArgs.from_dict(merge_dict_args(words, "hf_hub_log_args"))
    assert (args.hub_results_org, args.details_repo_name) == ("my-org", "evals")
    assert args.push_samples_to_hub and args.gated and not args.push_results_to_hub
    with pytest.raises(JaxevalError, match="did you mean 'push_results_to_hub'"):
        HubLogArgs.from_dict({"push_result_to_hub": True})
    with pytest.raises(JaxevalError, match="give the folder with --output_path"):
        HubLogArgs.from_dict({"output_path": "out"})
    with pytest.raises(JaxevalError, match="push_results_to_hub='yes' must be True or False"):
        HubLogArgs.from_dict({"push_results_to_hub": "yes"})


def test_the_upload_plan():
    results = Path("out/EleutherAI__pythia-160m/results_2024-05-01T10-00-00.5.json")
    samples = [results.with_name(f"samples_{t}_2024-05-01T10-00-00.5.jsonl") for t in ("gsm8k", "arc_easy")]  # fmt: skip
    args = HubLogArgs(
        details_repo_name="evals", push_results_to_hub=True, push_samples_to_hub=True, gated=True
    )
    plan = plan_hub_upload(
        args, org="my-org", model_name="EleutherAI/pythia-160m", model_source="jax",
        results_file=results, samples_files=samples,
    )  # fmt: skip
    assert [(c.repo_id, [(str(f), p) for f, p in c.files]) for c in plan.commits] == [
        (
            "my-org/evals-private",
            [(str(results), "EleutherAI/pythia-160m/results_2024-05-01T10-00-00.5.json")],
        ),
        (
            "my-org/evals-private",
            [
                (str(results), "EleutherAI__pythia-160m/results_2024-05-01T10-00-00.5.json"),
                (str(samples[1]), "EleutherAI__pythia-160m/samples_arc_easy_2024-05-01T10-00-00.5.jsonl"),
                (str(samples[0]), "EleutherAI__pythia-160m/samples_gsm8k_2024-05-01T10-00-00.5.jsonl"),
            ],
        ),
    ]  # fmt: skip
    assert plan.private and plan.gated_repo == plan.card_repo == "my-org/evals-private"
    only_results = HubLogArgs(
        results_repo_name="scores", push_results_to_hub=True, public_repo=True
    )
    plan = plan_hub_upload(
        only_results, org="o", model_name="m", model_source="jax", results_file=results,
        samples_files=samples,
    )  # fmt: skip
    assert [c.repo_id for c in plan.commits] == ["o/scores"]
    assert plan.card_repo == "o/scores" and plan.gated_repo is None and not plan.private


def test_dataset_card_lists_the_newest_file_per_model_and_task():
    files = [
        "org__m/results_2024-05-01T10-00-00.5.json",
        "org__m/samples_arc_easy_2024-05-01T10-00-00.5.jsonl",
        "org__m/samples_arc_easy_2024-04-01T09-00-00.1.jsonl",
        "README.md",
    ]
    assert card_configs(files) == [
        {
            "config_name": "org__m__arc_easy",
            "data_files": [
                {"split": "2024_05_01T10_00_00.5", "path": ["**/samples_arc_easy_2024-05-01T10-00-00.5.jsonl"]},
                {"split": "latest", "path": ["**/samples_arc_easy_2024-05-01T10-00-00.5.jsonl"]},
            ],
        },
        {
            "config_name": "org__m__results",
            "data_files": [
                {"split": "2024_05_01T10_00_00.5", "path": ["**/results_2024-05-01T10-00-00.5.json"]},
                {"split": "latest", "path": ["**/results_2024-05-01T10-00-00.5.json"]},
            ],
        },
    ]  # fmt: skip
    card = str(dataset_card("o/evals", files, {"results": {"arc_easy": {"acc,none": 0.5}}},
                            model_name="org/m", model_source="jax", point_of_contact="me"))  # fmt: skip
    assert "config_name: org__m__arc_easy" in card and "point_of_contact: me" in card
    assert '"acc,none": 0.5' in card and "[org/m](https://huggingface.co/org/m)" in card


@pytest.fixture
def no_saved_token(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


def test_access_checks(no_saved_token, monkeypatch):
    from huggingface_hub import constants

    assert check_hub_access(HubLogArgs(hub_results_org="o")) == "o"  # nothing to push: no network
    pushing = HubLogArgs(push_results_to_hub=True)
    with pytest.raises(JaxevalError, match="needs a token with write access"):
        check_hub_access(pushing)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    assert constants.HF_HUB_OFFLINE  # tests/conftest.py
    with pytest.raises(JaxevalError, match=r"offline mode is on \(HF_HUB_OFFLINE=1\)"):
        check_hub_access(pushing)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(
        JaxevalError, match=f"cannot reach the Hugging Face Hub at {endpoint} within 2 s"
    ):
        check_hub_access(pushing, endpoint=endpoint, timeout=2.0)
    assert time.monotonic() - start < 10


def test_cli_fails_before_the_model_loads(
    no_saved_token, fake_model, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    base = ["run", "--model", "fake", "--tasks", "arc_easy", "--output_path", str(tmp_path / "out")]
    rc = main([*base, "--hf_hub_log_args", "hub_results_org=o,push_results_to_hub=True"])
    err = capsys.readouterr().err
    assert rc == 2 and "offline mode is on" in err and "field 'hf_hub_log_args'" in err
    assert fake_model == [] and not (tmp_path / "out").exists()
    rc = main(["run", "--model", "fake", "--tasks", "arc_easy", "--hf_hub_log_args", "push_samples_to_hub=True"])  # fmt: skip
    assert rc == 2 and "add --output_path DIR" in capsys.readouterr().err
    rc = main([*base, "--hf_hub_log_args", "push_resuls_to_hub=True"])
    assert rc == 2 and "did you mean 'push_results_to_hub'" in capsys.readouterr().err
    assert fake_model == []
