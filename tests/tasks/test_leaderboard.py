"""The Open LLM Leaderboard v2 tasks (lm-eval's `leaderboard` group) against lm-eval itself.

One task per family (IFEval, BBH, GPQA, MATH-hard, MMLU-Pro, MuSR) runs on ten hand-written docs
in its hub dataset's schema (tests/tasks/data, hub layout), as the leaderboard runs them: chat
template applied and few-shot examples as multi-turn. jaxeval reads lm-eval's own YAML and helpers
by name through `--data_dir`; lm-eval reads the same files through override YAMLs. Requests,
per-document scores and aggregates must be equal.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.fake_lm import with_chat
from tests.tasks import fake_lm
from tests.tasks.oracle import (
    Case,
    assert_same_requests,
    assert_same_results,
    assert_same_samples,
    write_lm_eval_overrides,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]
DATA = Path(__file__).parent / "data"

# Answers that satisfy some IFEval instructions and some MATH golds (the rest fail them).
GENERATIONS = (
    " the sun rises slowly over the quiet hills",
    " *first part* is here and *second part* is there",
    ' "I like blue because it is calm."',
    " <<Ode to the sea>>\nWaves roll in. Is there anything else I can help with?",
    " BREAD MADE WITH LOVE",
    ' ["apple", "pear", "plum"]',
    " Bring an umbrella, jump in a puddle, and smile",
    " The final answer is $4$. I hope it is correct.",
    " Final Answer: The final answer is $\\frac{5}{6}$. I hope it is correct.",
    " We compute, so it is 81.",
)
TASKS = {
    "leaderboard_ifeval": "leaderboard/ifeval/ifeval.yaml",
    "leaderboard_bbh_boolean_expressions": "leaderboard/bbh_mc/boolean_expressions.yaml",
    "leaderboard_gpqa_main": "leaderboard/gpqa/gpqa_main_zeroshot.yaml",
    "leaderboard_math_algebra_hard": "leaderboard/math/math_algebra.yaml",
    "leaderboard_mmlu_pro": "leaderboard/mmlu_pro/mmlu_pro.yaml",
    "leaderboard_musr_murder_mysteries": "leaderboard/musr/musr_murder_mysteries.yaml",
}


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    from jaxeval.api.data import find_local_files
    from jaxeval.api.task_manager import TaskManager

    tm = TaskManager(catalogue=True)
    out = {}
    for name, rel in TASKS.items():
        assert tm.source_of(name) == "lm-eval"
        cfg = tm.task_config(name)
        splits = [
            s
            for s in (cfg.training_split, cfg.validation_split, cfg.test_split, cfg.fewshot.split)
            if s
        ]
        found = find_local_files(
            str(DATA), dataset_path=cfg.dataset_path, dataset_name=cfg.dataset_name, splits=splits
        )
        assert found, name
        files = {s: os.path.relpath(p, DATA) for s, p in found.items()}
        out[name] = Case(name, rel, DATA, files, generations=GENERATIONS)
    return out


@pytest.fixture(scope="module")
def lm_eval_tm(tmp_path_factory, cases):
    from lm_eval.tasks import TaskManager

    folder = tmp_path_factory.mktemp("lm_eval_leaderboard")
    write_lm_eval_overrides(list(cases.values()), folder)
    return TaskManager(include_path=str(folder))


def _run_both(case: Case, lm_eval_tm):
    import lm_eval

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    common = dict(
        limit=10,
        bootstrap_iters=1000,
        log_samples=True,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
    )
    their_log, our_log = fake_lm.RequestLog(), fake_lm.RequestLog()
    theirs = lm_eval.simple_evaluate(
        model=with_chat(fake_lm.make_lm_eval_lm(their_log, list(case.generations))),
        tasks=[case.task],
        task_manager=lm_eval_tm,
        **common,
    )
    ours = jaxeval.simple_evaluate(
        model=with_chat(fake_lm.make_jaxeval_lm(our_log, list(case.generations))),
        tasks=[case.task],
        task_manager=TaskManager(data_dir=str(DATA)),
        **common,
    )
    return ours, our_log, theirs, their_log


@pytest.mark.parametrize("task", list(TASKS))
def test_leaderboard_task_matches_lm_eval_with_chat_template(cases, lm_eval_tm, task):
    ours, our_log, theirs, their_log = _run_both(cases[task], lm_eval_tm)
    assert_same_requests(our_log, their_log)
    first = next(v for v in our_log.calls.values() if v)[0][0]
    assert first.startswith("<|im_start|>")  # the chat template was applied
    assert_same_results(ours, theirs, task)
    assert_same_samples(ours, theirs, task)
    assert ours["samples"][task] and len(ours["samples"][task]) <= 10


def test_ifeval_without_punkt_data_fails_first_saying_what_to_fetch(tmp_path, monkeypatch):
    import json

    from jaxeval.api import requirements
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.errors import JaxevalError

    monkeypatch.setattr(requirements, "has_nltk_resource", lambda resource: False)
    # the ten docs use no Punkt-scored instruction: they build without the data
    assert TaskManager(data_dir=str(DATA)).load(["leaderboard_ifeval"]).tasks
    rows = (DATA / "instruction-following-eval/train.jsonl").read_text().splitlines()
    extra = {
        "key": 2001,
        "prompt": "Answer in exactly 3 sentences.",
        "instruction_id_list": ["length_constraints:number_sentences"],
        "kwargs": [{"relation": "at least", "num_sentences": 3}],
    }
    folder = tmp_path / "instruction-following-eval"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join([*rows, json.dumps(extra)]) + "\n")
    with pytest.raises(JaxevalError) as e:
        TaskManager(data_dir=str(tmp_path)).load(["leaderboard_ifeval"])
    text = str(e.value)
    assert "document 10" in text and "punkt_tab" in text and requirements.FETCH_PUNKT in text


@pytest.mark.slow
def test_jaxeval_run_leaderboard_ifeval_through_the_jax_model(tmp_path):
    import json

    from jaxeval.cli import main
    from tests.helpers.tiny_models import tiny_checkpoint

    ckpt = tiny_checkpoint("llama")
    out = tmp_path / "out"
    rc = main(
        [
            "run",
            "--model",
            "jax",
            "--model_args",
            f"pretrained={ckpt},dtype=float32,mesh=single,max_length=128,token_budget=256",
            "--tasks",
            "leaderboard_ifeval",
            "--data_dir",
            str(DATA),
            "--gen_kwargs",
            "max_gen_toks=16",
            "--output_path",
            str(out),
            "--log_samples",
            "--bootstrap_iters",
            "0",
        ]
    )
    assert rc == 0
    (results,) = out.rglob("results_*.json")
    res = json.loads(results.read_text())["results"]["leaderboard_ifeval"]
    for metric in (
        "prompt_level_strict_acc",
        "inst_level_strict_acc",
        "prompt_level_loose_acc",
        "inst_level_loose_acc",
    ):
        assert 0.0 <= res[f"{metric},none"] <= 1.0
    (samples,) = out.rglob("samples_leaderboard_ifeval_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 10 and all(isinstance(r["resps"][0][0], str) for r in rows)


def test_the_leaderboard_group_resolves_to_39_tasks_that_all_build():
    """`--tasks leaderboard`: six subgroups, every leaf's config, helpers, metrics and filters."""
    from jaxeval.api import scoring
    from jaxeval.api.task_manager import Kind, TaskManager
    from jaxeval.api.yaml_loader import load_yaml

    tm = TaskManager()

    def leaves(name: str) -> list[str]:
        entry = tm.index[name]
        if entry.kind is Kind.TASK:
            return [name]
        members = load_yaml(entry.yaml_path, resolve_functions=False)["task"]
        return [leaf for m in members for leaf in leaves(m if isinstance(m, str) else m["task"])]

    top = load_yaml(tm.index["leaderboard"].yaml_path, resolve_functions=False)["task"]
    assert top == [
        "leaderboard_mmlu_pro",
        "leaderboard_bbh",
        "leaderboard_gpqa",
        "leaderboard_math_hard",
        "leaderboard_ifeval",
        "leaderboard_musr",
    ]
    names = leaves("leaderboard")
    assert len(names) == 39
    for name in names:
        config = tm.task_config(name)
        scoring.resolve_metrics(config)
        scoring.resolve_filters(config)


@pytest.mark.slow
def test_the_whole_leaderboard_group_matches_lm_eval(tmp_path):
    """`--tasks leaderboard` with the chat template, on schema-valid docs for all 39 tasks (the six
    above plus four per other task): every request, every task's and group's scores."""
    import lm_eval
    from lm_eval.tasks import TaskManager as LmTaskManager

    import jaxeval
    from jaxeval.api.data import find_local_files
    from jaxeval.api.task_manager import Kind, TaskManager

    tm = TaskManager(catalogue=True)
    names = [
        n
        for n, e in tm.index.items()
        if e.kind is Kind.TASK and e.source == "lm-eval" and n.startswith("leaderboard_")
    ]
    cases = []
    for name in sorted(names):
        cfg = tm.task_config(name)
        splits = [
            s
            for s in (cfg.training_split, cfg.validation_split, cfg.test_split, cfg.fewshot.split)
            if s
        ]
        found = find_local_files(
            str(DATA), dataset_path=cfg.dataset_path, dataset_name=cfg.dataset_name, splits=splits
        )
        assert found, name
        rel = os.path.relpath(tm.index[name].yaml_path, tm.catalogue_dir)
        cases.append(Case(name, rel, DATA, {s: os.path.relpath(p, DATA) for s, p in found.items()}))
    assert len(cases) == 39
    write_lm_eval_overrides(cases, tmp_path)
    common = dict(
        limit=4,
        bootstrap_iters=100,
        log_samples=False,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
    )
    their_log, our_log = fake_lm.RequestLog(), fake_lm.RequestLog()
    theirs = lm_eval.simple_evaluate(
        model=with_chat(fake_lm.make_lm_eval_lm(their_log, list(GENERATIONS))),
        tasks=["leaderboard"],
        task_manager=LmTaskManager(include_path=str(tmp_path)),
        **common,
    )
    ours = jaxeval.simple_evaluate(
        model=with_chat(fake_lm.make_jaxeval_lm(our_log, list(GENERATIONS))),
        tasks=["leaderboard"],
        task_manager=TaskManager(data_dir=str(DATA)),
        **common,
    )
    assert_same_requests(our_log, their_log)
    assert set(ours["results"]) == set(theirs["results"])
    for name, theirs_row in theirs["results"].items():
        ours_row = ours["results"][name]
        for key, value in theirs_row.items():
            if "," in key and "_stderr" not in key:
                assert ours_row[key] == pytest.approx(value, rel=1e-12, abs=1e-12), (name, key)
    assert set(ours["groups"]) == set(theirs["groups"])
    assert ours["group_subtasks"] == theirs["group_subtasks"]
