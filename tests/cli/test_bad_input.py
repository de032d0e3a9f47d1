"""Bad command-line input: one paragraph naming the option, exit 2, never a traceback, before any
task or model loads; `ls` output from its content; `report -o` into new folders; an offline hub
noticed at once."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from jaxeval.cli import main
from jaxeval.cli.hub import offline_unless_reachable
from jaxeval.platform.tpu_host import tpu_attached
from tests.report.runs import RUNS


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """`jaxeval ARGV` in this process: (exit status, stderr); argparse's errors exit instead."""
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


# a model path that does not exist: every error below must come before anything tries to load it
RUN = ["run", "--model", "jax", "--model_args", "pretrained=/nonexistent/model", "--tasks", "x"]


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--metadata", "garbage"], ["field 'metadata'", "'garbage' is not key=value"]),
        (["--metadata", '{"a": 1'], ["--metadata is not valid JSON"]),
        (["--verbosity", "LOUD"], ["--verbosity 'LOUD' is not a logging level"]),
        (["--seed", str(2**32)], ["--seed 4294967296", "out of range", "2**32-1"]),
        (["--seed", "0,-1,0,0"], ["--seed -1 (the numpy seed) is out of range"]),
        (["--seed", "1,2"], ["--seed '1,2'", "3-4 comma-separated"]),
        (["--seed", "x"], ["--seed value 'x'"]),
        (["--limit", "inf"], ["--limit inf is out of range"]),
        (["--limit", "nan"], ["--limit nan is out of range"]),
        (["--limit", "-3"], ["--limit -3.0 is out of range"]),
        (["--limit", "ten"], ["--limit 'ten' is not a number"]),
        (["--model_args", "max_length=abc"], ["max_length='abc' is not an integer"]),
        (["--model_args", "max_gen_toks=1.5"], ["max_gen_toks=1.5 is not an integer"]),
        (["--model_args", "add_bos_token=maybe"], ["add_bos_token='maybe' is not true or false"]),
        (["--model_args", "dtype=float8"], ["unknown dtype 'float8'", "bfloat16"]),
        (["--model_args", "max_lenght=9"], ["unknown model argument(s) max_lenght"]),
        (["--device", "cpu:64"], ["--device 'cpu:64'", "no cpu device 64", "this host has 8"]),
        (["--device", "cpu:x"], ["--device 'cpu:x'", "index 'x' is not a number"]),
        (["--device", "mps"], ["--device 'mps' is not a JAX platform"]),
        (["--cache_requests", "maybe"], ["--cache_requests", "invalid choice: 'maybe'"]),
        (["--no_such_option", "1"], ["unrecognized arguments: --no_such_option"]),
    ],
)
def test_bad_value_is_one_paragraph_and_exit_2(capsys, extra, needles):
    rc, err = run_cli(capsys, *RUN, *extra)
    assert rc == 2, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert "/nonexistent/model" not in err  # the model was never looked for
    assert "What to do:" in err and len(err.strip().splitlines()) <= 2


@pytest.mark.skipif(tpu_attached(), reason="a TPU is attached to this host")
def test_device_tpu_without_a_tpu(capsys):
    rc, err = run_cli(capsys, *RUN, "--device", "tpu")
    assert rc == 2 and "--device 'tpu'" in err and "What to do: use --device cpu" in err


@pytest.mark.skipif(
    importlib.util.find_spec("jax_cuda12_plugin") is not None, reason="JAX's CUDA plugin is here"
)
def test_device_cuda_without_cuda(capsys):
    rc, err = run_cli(capsys, *RUN, "--device", "cuda")
    assert rc == 2 and "--device 'cuda'" in err and "CUDA plugin is not installed" in err


@pytest.mark.parametrize(
    "text, needles",
    [
        ("tasks: [arc_easy\nlimit: 3\n", ["--config is not valid YAML at line", "run.yaml"]),
        ("- arc_easy\n- hellaswag\n", ["--config holds a list, not a mapping"]),
        ("taks: arc_easy\n", ["unknown key 'taks' in --config", "did you mean 'tasks'"]),
        ("tasks: arc_easy\nlimit: .inf\n", ["--limit inf is out of range"]),
        ("tasks: arc_easy\nseed: [1, 2]\n", ["field 'seed'", "3-4 comma-separated"]),
        ("tasks: arc_easy\nlog_samples: 3\n", ["log_samples must be true or false"]),
    ],
)
def test_bad_config_file(capsys, tmp_path, text, needles):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    rc, err = run_cli(capsys, "run", "--model", "never", "--config", str(config))
    assert rc == 2, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_missing_config_file(capsys, tmp_path):
    rc, err = run_cli(capsys, "run", "--config", str(tmp_path / "none.yaml"))
    assert rc == 2 and "cannot read --config" in err and "none.yaml" in err


def test_compilation_cache_that_is_a_file(capsys, tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("")
    rc, err = run_cli(capsys, *RUN, "--compilation_cache", str(blocker / "xla"))
    assert rc == 2 and "field 'compilation_cache'" in err and "is a file" in err


def test_compilation_cache_unwritable(capsys, unwritable):
    rc, err = run_cli(capsys, *RUN, "--compilation_cache", os.path.join(unwritable, "xla"))
    assert rc == 2 and "field 'compilation_cache'" in err and "cannot write" in err


def test_bad_input_in_a_fresh_process_prints_no_traceback(tmp_path):
    """The installed command, end to end: one paragraph on stderr, exit 2."""
    for argv in (["--metadata", "max_seq_lengths=[4096", "x"], ["--device", "cpu:5"]):
        done = subprocess.run(
            [sys.executable, "-m", "jaxeval.cli", *RUN, *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "XLA_FLAGS": ""},  # one CPU device
            timeout=300,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "jaxeval: error:" in done.stderr


# -- report -o, ls -----------------------------------------------------------------------------


def test_report_creates_missing_folders_for_its_output(capsys, tmp_path):
    out = tmp_path / "new" / "deeper" / "report.html"
    rc, _ = run_cli(capsys, "report", str(RUNS / "lm_eval"), "-o", str(out))
    assert rc == 0 and out.read_text().startswith("<!DOCTYPE html>")


def test_report_output_under_a_file(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    rc, err = run_cli(capsys, "report", str(RUNS / "lm_eval"), "-o", str(blocker / "r.html"))
    assert rc == 2 and "field 'output'" in err and "a file is in the way" in err
    assert blocker.read_text() == "keep"


def test_report_output_onto_an_existing_folder(capsys, tmp_path):
    rc, err = run_cli(capsys, "report", str(RUNS / "lm_eval"), "-o", str(tmp_path))
    assert rc == 2 and "field 'output'" in err and "is a folder" in err
    assert "What to do:" in err and len(err.strip().splitlines()) <= 2


def test_report_output_onto_an_unwritable_place(capsys, unwritable):
    out = os.path.join(unwritable, "r.html")
    rc, err = run_cli(capsys, "report", str(RUNS / "lm_eval"), "-o", out)
    assert rc == 2 and "field 'output'" in err and "cannot write" in err


def test_empty_model_args_names_pretrained(capsys):
    rc, err = run_cli(capsys, "run", "--model", "jax", "--model_args", "", "--tasks", "x")
    assert rc == 2 and "pretrained=" in err and "field 'model_args'" in err, err


@pytest.mark.parametrize("value", ["-1", "0", "1.5", "many"])
def test_token_budget_must_be_a_positive_integer(capsys, value):
    argv = ["--model_args", f"pretrained=/nonexistent/model,token_budget={value}"]
    rc, err = run_cli(capsys, *RUN[:3], *argv, *RUN[5:])
    assert rc == 2 and "token_budget=" in err and value in err, err
    assert "/nonexistent/model" not in err
    assert "What to do:" in err


def test_ls_prints_short_paths_in_columns_as_wide_as_needed(capsys, tmp_path):
    include = tmp_path / "mine"
    include.mkdir()
    (include / "my_task.yaml").write_text("task: my_task\ndataset_path: json\n")
    assert main(["ls", "tasks", "--include_path", str(include)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], lines[1:]
    assert header.index("kind") <= 42  # names up to 40 wide; longer ones push only their row
    assert not any(" " * 45 in line for line in rows)
    assert not any("site-packages" in line for line in rows)
    assert any(r.startswith("arc_easy ") and "jaxeval: tasks/arc/arc_easy.yaml" in r for r in rows)
    mine = next(r for r in rows if r.startswith("my_task "))
    assert mine.endswith(f"include: {include / 'my_task.yaml'}")


# -- the hub, offline ----------------------------------------------------------------------------


@pytest.fixture
def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_an_unreachable_hub_goes_offline_at_once(monkeypatch, closed_port, caplog):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert offline_unless_reachable(timeout=5) is True
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert [r.getMessage().count("--data_dir") for r in caplog.records] == [1]
    assert offline_unless_reachable() is False  # offline already: nothing probed


def test_validate_offline_fails_fast_and_says_data_dir(tmp_path, closed_port):
    """`jaxeval validate` on a hub dataset with no network: one warning line, one error saying
    `--data_dir`, in seconds (not after the hub's retries), each line once."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "hub_task.yaml").write_text(
        textwrap.dedent("""\
            task: hub_task
            dataset_path: no-such-org/no-such-dataset-for-jaxeval-tests
            test_split: test
            output_type: loglikelihood
            doc_to_text: "{{q}}"
            doc_to_target: "{{a}}"
            """)
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    }
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{closed_port}"
    argv = ["validate", "--tasks", "hub_task", "--include_path", str(folder)]
    done = subprocess.run(
        [sys.executable, "-m", "jaxeval.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    err = done.stderr
    assert done.returncode == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)) == 3, err  # the warning, the error, its What to do
    assert "cannot be reached" in lines[0] and "--data_dir" in lines[2]
    assert "Retrying" not in err
