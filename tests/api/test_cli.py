"""The command line end to end, with the deterministic fake model: outputs, schema, bad input."""

from __future__ import annotations

import json
import textwrap

import pytest

from jaxeval.cli import main
from jaxeval.lm.base import MODELS
from jaxeval.platform.phases import PHASES
from tests.api import fake_lm
from tests.helpers.copy_rows import ROWS

CALLS: list[int] = []
ARC_EASY_TEST_ROWS = ROWS["ai2_arc/ARC-Easy/test.jsonl"]


@pytest.fixture(autouse=True)
def fake_model():
    cls = type(fake_lm.make_jaxeval_lm())

    class Counting(cls):
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def loglikelihood(self, requests):
            CALLS.append(len(requests))
            return super().loglikelihood(requests)

    MODELS.add("fake", Counting, replace=True)
    CALLS.clear()
    yield


def run(*args: str) -> int:
    return main(["run", "--model", "fake", *args])


def test_run_writes_lm_eval_schema_and_samples(tmp_path, data_root, capsys):
    out = tmp_path / "out"
    rc = run(
        "--model_args",
        "pretrained=/models/tiny-llama",
        "--tasks",
        "arc_easy",
        "--limit",
        "10",
        "--data_dir",
        str(data_root),
        "--output_path",
        str(out),
        "--log_samples",
        "--bootstrap_iters",
        "100",
    )
    assert rc == 0
    folder = out / "__models__tiny-llama"
    results_files = list(folder.glob("results_*.json"))
    assert len(results_files) == 1
    res = json.loads(results_files[0].read_text())
    for key in (
        "results",
        "group_subtasks",
        "configs",
        "versions",
        "n-shot",
        "higher_is_better",
        "n-samples",
        "config",
        "git_hash",
        "date",
        "task_hashes",
        "model_name",
        "model_name_sanitized",
    ):
        assert key in res, key
    r = res["results"]["arc_easy"]
    assert set(r) >= {
        "name",
        "alias",
        "sample_len",
        "acc,none",
        "acc_stderr,none",
        "acc_norm,none",
        "acc_norm_stderr,none",
    }
    assert r["sample_len"] == 10
    assert res["n-samples"]["arc_easy"] == {"original": ARC_EASY_TEST_ROWS, "effective": 10}
    assert res["versions"]["arc_easy"] == 1.0
    assert res["config"]["limit"] == 10.0 and res["config"]["model"] == "fake"
    assert set(res["config"]["timing"]) == {"tasks_s", "model_s", "evaluate_s"}  # no JaxLM batches
    timing = res["timing"]  # where the wall time went, phase by phase
    assert set(timing["phases_s"]) == set(PHASES)
    assert timing["phases_s"]["write"] > 0 and timing["phases_s"]["data"] > 0
    claimed = sum(timing["phases_s"].values())
    assert claimed + timing["unaccounted_s"] == pytest.approx(timing["wall_s"], abs=0.01)
    # within 5% of the wall; this in-process run takes ~0.2 s, where a few milliseconds of
    # bookkeeping between phases are already 5%, so 20 ms is the floor
    assert timing["unaccounted_s"] <= max(0.05 * timing["wall_s"], 0.02), timing
    samples = (folder / results_files[0].name.replace("results_", "samples_arc_easy_")).with_suffix(
        ".jsonl"
    )
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    assert len(lines) == 10
    first = lines[0]
    assert set(first) >= {
        "doc_id",
        "doc",
        "target",
        "arguments",
        "resps",
        "filtered_resps",
        "filter",
        "metrics",
        "doc_hash",
        "prompt_hash",
        "target_hash",
        "acc",
        "acc_norm",
    }
    assert first["arguments"]["gen_args_0"]["arg_0"].startswith("Question: ")
    assert isinstance(first["resps"][0][0][0], str)
    table = capsys.readouterr().out
    assert "|arc_easy|" in table and "acc_norm" in table and "±" in table
    assert not list(out.rglob("*.tmp"))


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _data(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


BASE = textwrap.dedent("""\
    task: bad_task
    dataset_path: json
    dataset_kwargs:
      data_files:
        test: {data}
    test_split: test
    output_type: multiple_choice
    doc_to_text: "{{{{q}}}}"
    doc_to_choice: "{{{{choices}}}}"
    doc_to_target: "{{{{gold}}}}"
    """)
ROWS = [
    {"q": "one?", "choices": ["a", "b"], "gold": 1},
    {"q": "two?", "choices": ["c", "d"], "gold": 0},
]


@pytest.mark.parametrize(
    "extra,rows,needles",
    [
        (
            "metric_list:\n  - metric: accuraccy\n",
            ROWS,
            ["unknown metric 'accuraccy'", "bad_task", "metric_list"],
        ),
        (
            "metric_list:\n  - metric: acc\n    aggregation: meen\n",
            ROWS,
            ["unknown aggregation 'meen'", "mean"],
        ),
        (
            "filter_list:\n  - name: f\n    filter:\n      - function: regexx\n",
            ROWS,
            ["unknown filter 'regexx'"],
        ),
        (
            "",
            [ROWS[0], {"q": "two?", "choices": ["c", "d"], "gold": 5}],
            ["document 1", "outside the 2 choices"],
        ),
        (
            "doc_to_decontamination_query: x\nprocess_results: !function nomod_abc.f\n",
            ROWS,
            ["module 'nomod_abc' is not beside the YAML"],
        ),
        ("description: '{{missing_field}}'\n", ROWS, ["missing_field", "document 0", "bad_task"]),
    ],
)
def test_bad_task_input_is_one_clear_error_and_no_results(tmp_path, capsys, extra, rows, needles):
    data = _data(tmp_path, rows)
    yaml_path = _write(tmp_path, "bad.yaml", BASE.format(data=data) + extra)
    out = tmp_path / "out"
    rc = run("--tasks", yaml_path, "--output_path", str(out))
    err = capsys.readouterr().err
    assert rc == 2
    assert "jaxeval: error: " in err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()


def test_target_not_among_choices(tmp_path, capsys):
    rows = [{"q": "one?", "choices": ["a", "b"], "gold": "z"}]
    text = BASE.format(data=_data(tmp_path, rows)).replace('"{{gold}}"', "gold")
    rc = run("--tasks", _write(tmp_path, "t.yaml", text))
    err = capsys.readouterr().err
    assert rc == 2 and "target 'z' is not among the choices" in err and "document 0" in err


@pytest.mark.parametrize("limit", ["-1", "0", "2.5"])
def test_limit_out_of_range(tmp_path, data_root, capsys, limit):
    out = tmp_path / "o"
    rc = run(
        "--tasks",
        "arc_easy",
        "--data_dir",
        str(data_root),
        "--limit",
        limit,
        "--output_path",
        str(out),
    )
    assert rc == 2 and "--limit" in capsys.readouterr().err and not out.exists()


def test_unknown_task_suggests(capsys):
    assert run("--tasks", "arc_esay") == 2
    err = capsys.readouterr().err
    assert "unknown task, group or tag 'arc_esay'" in err and "arc_easy" in err


def test_log_samples_needs_output_path(capsys):
    assert run("--tasks", "arc_easy", "--log_samples") == 2
    assert "--output_path" in capsys.readouterr().err


def test_malformed_model_args(capsys):
    assert run("--tasks", "arc_easy", "--model_args", "pretrained") == 2
    assert "no '='" in capsys.readouterr().err


def test_samples_flag_and_use_cache(tmp_path, data_root, capsys):
    cache = tmp_path / "cache" / "lm"
    args = [
        "--tasks",
        "arc_easy",
        "--data_dir",
        str(data_root),
        "--samples",
        '{"arc_easy": [3, 7, 11]}',
        "--use_cache",
        str(cache),
        "--output_path",
        str(tmp_path / "o"),
        "--log_samples",
    ]
    assert run(*args) == 0
    first_calls = sum(CALLS)
    assert first_calls > 0
    CALLS.clear()
    assert run(*args) == 0
    assert sum(CALLS) == 0
    files = sorted((tmp_path / "o").rglob("samples_arc_easy_*.jsonl"))
    ids = [json.loads(x)["doc_id"] for x in files[-1].read_text().splitlines()]
    assert ids == [3, 7, 11]


def test_predict_only_uses_bypass(tmp_path, data_root):
    out = tmp_path / "o"
    assert (
        run(
            "--tasks",
            "gsm8k",
            "--data_dir",
            str(data_root),
            "--limit",
            "3",
            "--num_fewshot",
            "0",
            "--predict_only",
            "--output_path",
            str(out),
        )
        == 0
    )
    res = json.loads(next(out.rglob("results_*.json")).read_text())
    assert res["results"]["gsm8k"]["bypass,strict-match"] == 999


def test_ls_lists_tasks_groups_tags(capsys):
    assert main(["ls", "tasks"]) == 0
    out = capsys.readouterr().out
    for name in (
        "arc_easy",
        "mmlu_anatomy",
        "mmlu",
        "mmlu_stem",
        "ai2_arc",
        "lambada_openai",
        "gsm8k",
    ):
        assert f"\n{name} " in out
    assert main(["ls", "groups"]) == 0
    groups = capsys.readouterr().out
    assert "\nmmlu_humanities " in groups and "\narc_easy " not in groups


def test_cache_requests_writes_reads_refreshes_and_deletes(tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("JAXEVAL_CACHE_PATH", str(tmp_path / "rc"))
    base = ["--tasks", "arc_easy", "--data_dir", str(data_root), "--limit", "5", "--output_path"]
    assert run(*base, str(tmp_path / "a"), "--cache_requests", "true") == 0
    files = list((tmp_path / "rc").glob("requests-arc_easy-0shot-*.json"))
    assert len(files) == 1
    from jaxeval.api import request_cache

    cached = request_cache.decode_requests(json.loads(files[0].read_bytes()))
    assert len(cached) == ARC_EASY_TEST_ROWS  # every document is built when writing, like lm-eval
    assert run(*base, str(tmp_path / "b"), "--cache_requests") == 0
    ra = json.loads(next((tmp_path / "a").rglob("results_*.json")).read_text())["results"][
        "arc_easy"
    ]
    rb = json.loads(next((tmp_path / "b").rglob("results_*.json")).read_text())["results"][
        "arc_easy"
    ]
    assert ra == rb
    assert run(*base, str(tmp_path / "c"), "--cache_requests", "delete") == 0
    assert len(list((tmp_path / "rc").glob("*.json"))) == 1


def test_trackio_is_refused_clearly(capsys):
    """W&B and the Hub are supported (tests/trackers); lm-eval's trackio logger is not."""
    assert run("--tasks", "arc_easy", "--trackio_args", "project=x") == 2
    err = capsys.readouterr().err
    assert "--trackio_args is not supported by jaxeval" in err and "--wandb_args" in err


def test_bad_device(capsys):
    assert run("--tasks", "arc_easy", "--device", "mps") == 2
    assert "not a JAX platform" in capsys.readouterr().err


def test_data_dir_finds_collection_configs_by_name(data_root):
    from jaxeval.api.data import find_local_files

    found = find_local_files(
        str(data_root),
        dataset_path="aps/super_glue",
        dataset_name="boolq",
        splits=["train", "validation"],
    )
    assert found == {"validation": str(data_root / "boolq" / "validation.jsonl")}
    arc = find_local_files(
        str(data_root),
        dataset_path="allenai/ai2_arc",
        dataset_name="ARC-Easy",
        splits=["train", "validation", "test"],
    )
    assert set(arc) == {"validation", "test"}
    assert (
        find_local_files(
            str(data_root), dataset_path="x/none", dataset_name="nope", splits=["test"]
        )
        is None
    )
