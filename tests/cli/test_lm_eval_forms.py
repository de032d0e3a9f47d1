"""lm-eval 0.4.13's command-line forms, run unchanged: space- or comma-separated lists, `k=v` words
or JSON for dict options, a `--config` YAML beneath the command line, and the legacy form."""

from __future__ import annotations

import json

import pytest

from jaxeval.cli import COMMANDS, main
from jaxeval.cli.run_args import dict_arg, model_args_text
from jaxeval.lm.base import MODELS
from tests.api import fake_lm

SEEN: list[dict] = []


def parse(*argv: str):
    return COMMANDS["run"].parse_args(list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["--tasks", "arc_easy", "hellaswag"],
        ["--tasks", "arc_easy,hellaswag"],
        ["-t", "arc_easy", "--tasks", "hellaswag"],
    ],
)
def test_tasks_space_comma_or_repeated(argv):
    assert parse(*argv).tasks == ["arc_easy", "hellaswag"]


@pytest.mark.parametrize(
    "words, text",
    [
        (["pretrained=X", "dtype=float32"], "pretrained=X,dtype=float32"),
        (["pretrained=X,dtype=float32"], "pretrained=X,dtype=float32"),
        (['{"pretrained": "X", "dtype": "float32"}'], '{"pretrained": "X", "dtype": "float32"}'),
        # a comma inside a value: the merged dict as JSON, so the evaluator reads it back whole
        (["pretrained=X", "tokenizer=['a','b']"], '{"pretrained": "X", "tokenizer": ["a", "b"]}'),
    ],
)
def test_model_args_forms(words, text):
    args = parse("--tasks", "t", "--model_args", *words)
    assert model_args_text(args.model_args) == text


@pytest.mark.parametrize(
    "words",
    [
        ["max_seq_lengths=[4096,8192]", "tokenizer=gpt2"],
        ["max_seq_lengths=[4096,8192],tokenizer=gpt2"],
        ['{"max_seq_lengths": [4096, 8192], "tokenizer": "gpt2"}'],
    ],
)
def test_metadata_k_v_or_json(words):
    args = parse("--tasks", "t", "--metadata", *words)
    assert dict_arg(args.metadata, "metadata") == {
        "max_seq_lengths": [4096, 8192],
        "tokenizer": "gpt2",
    }


def test_gen_kwargs_as_lm_evals_help_shows_them():
    args = parse("--tasks", "t", "--gen_kwargs", "temperature=0.8", "top_p=0.95", 'stop=["\\n\\n"]')
    assert dict_arg(args.gen_kwargs, "gen_kwargs") == {
        "temperature": 0.8,
        "top_p": 0.95,
        "stop": ["\n\n"],
    }
    args = parse("--tasks", "t", "--gen_kwargs", "temperature=0,until=['a','b']")
    assert dict_arg(args.gen_kwargs, "gen_kwargs") == {"temperature": 0, "until": ["a", "b"]}


@pytest.mark.parametrize(
    "text, seeds",
    [
        ("42", [42, 42, 42, 42]),
        ("0,None,8,52", [0, None, 8, 52]),
        ("1,2,3", [1, 2, 3, 1234]),  # lm-eval fills the fourth from its default
    ],
)
def test_seed_forms(text, seeds):
    assert parse("--tasks", "t", "--seed", text).seed == seeds


def test_optional_values_bare_or_given():
    args = parse("--tasks", "t", "--apply_chat_template", "--fewshot_as_multiturn", "false")
    assert args.apply_chat_template is True and args.fewshot_as_multiturn is False
    args = parse("--tasks", "t", "--apply_chat_template", "chatml", "--cache_requests")
    assert args.apply_chat_template == "chatml" and args.cache_requests == "true"
    assert parse("--tasks", "t").seed == [0, 1234, 1234, 1234]


def test_config_yaml_beneath_the_command_line(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "tasks: [arc_easy, 'hellaswag,lambada']\n"
        "model_args: {pretrained: X, dtype: float32}\n"
        "metadata: max_seq_lengths=[4096]\n"
        "limit: 10\nseed: 7\nlog_samples: true\nbatch_size: auto:2\n"
    )
    args = parse("--config", str(config), "-L", "3")
    assert args.tasks == ["arc_easy", "hellaswag", "lambada"]
    assert json.loads(model_args_text(args.model_args)) == {"pretrained": "X", "dtype": "float32"}
    assert dict_arg(args.metadata, "metadata") == {"max_seq_lengths": [4096]}
    assert args.limit == 3.0  # the command line wins (a short spelling too)
    assert args.seed == [7, 7, 7, 7] and args.log_samples is True and args.batch_size == "auto:2"


def test_validate_takes_space_or_comma_separated_tasks():
    parser = COMMANDS["validate"]
    assert parser.parse_args(["--tasks", "a", "b,c"]).tasks == ["a", "b", "c"]


@pytest.fixture
def recording_model():
    cls = type(fake_lm.make_jaxeval_lm())

    class Recording(cls):
        def __init__(self, **kwargs):
            SEEN.append(kwargs)

    MODELS.add("recording", Recording, replace=True)
    SEEN.clear()
    yield


def test_lm_evals_forms_run_unchanged_in_the_legacy_form(recording_model, data_root, tmp_path):
    """`jaxeval --model ... --tasks a b --model_args k=v k=v --metadata k=v` (no `run`): evaluated,
    every model argument typed, metadata reaching the tasks, the results file naming them."""
    out = tmp_path / "out"
    argv = ["--model", "recording", "--tasks", "arc_easy", "arc_challenge"]
    argv += ["--model_args", "pretrained=/m/tiny", "max_length=64", "add_bos_token=true"]
    argv += ["--metadata", "max_seq_lengths=[4096]", "--limit", "2", "--data_dir", str(data_root)]
    argv += ["--gen_kwargs", "temperature=0", "max_gen_toks=4", "--output_path", str(out)]
    argv += ["--seed", "3", "--bootstrap_iters", "10"]
    assert main(argv) == 0
    assert SEEN[-1]["pretrained"] == "/m/tiny" and SEEN[-1]["max_length"] == 64
    assert SEEN[-1]["add_bos_token"] is True
    saved = json.loads(next(out.rglob("results_*.json")).read_text())
    assert set(saved["results"]) == {"arc_easy", "arc_challenge"}
    assert saved["config"]["model_args"] == "pretrained=/m/tiny,max_length=64,add_bos_token=true"
    assert saved["config"]["gen_kwargs"] == {"temperature": 0, "max_gen_toks": 4}
    assert saved["config"]["random_seed"] == 3 and saved["config"]["fewshot_seed"] == 3
    assert saved["configs"]["arc_easy"]["metadata"]["max_seq_lengths"] == [4096]


def test_good_model_args_of_the_jax_model_pass_the_early_check():
    from jaxeval.cli.model_check import check_model_args

    words = ["pretrained=/m", "max_length=2048", "add_bos_token=True", "dtype=bf16"]
    words += ["gen_batch_size=8", "prefix_token_id=None", "attention=xla"]
    text = model_args_text(parse("--tasks", "t", "--model_args", *words).model_args)
    check_model_args("jax", text, batch_size="auto:4", max_batch_size=None)  # no error
