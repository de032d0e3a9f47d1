"""The library's task YAMLs against lm-eval 0.4.13's, without any data.

* parsed YAML: each side's own loader (includes merged, `!function` left unresolved) gives the same
  dict: same keys, values, tags, `metadata.version`, and helper names;
* `TaskConfig`: each side builds its config from the resolved YAML and dumps it; the dumps agree
  (helpers compared by name, see oracle.comparable_config);
* the CLI lists every task and the tags lm-eval gives them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jaxeval.api.task_manager import Kind, TaskManager, builtin_task_dir
from tests.tasks.cases import CASES
from tests.tasks.oracle import config_differences, lm_eval_tasks_dir

FOLDERS = (
    "drop",
    "gsm8k",
    "hellaswag",
    "openbookqa",
    "piqa",
    "sciq",
    "super_glue",
    "triviaqa",
    "truthfulqa",
    "wikitext",
    "winogrande",
)


@pytest.fixture(scope="module")
def manager() -> TaskManager:
    return TaskManager()


def _ours(manager: TaskManager, task: str) -> Path:
    return Path(manager.index[task].yaml_path)


def _theirs(task: str) -> Path:
    return Path(lm_eval_tasks_dir()) / CASES[task].lm_eval_yaml


def _raw(task: str, manager: TaskManager) -> tuple[dict, dict]:
    from lm_eval.tasks._yaml_loader import load_yaml as lm_eval_load_yaml

    from jaxeval.api.yaml_loader import load_yaml

    ours = load_yaml(_ours(manager, task), resolve_functions=False)
    theirs = lm_eval_load_yaml(_theirs(task), resolve_func=False)
    # lm-eval leaves an unresolved `!function utils.fn` as "<yaml dir>/utils.fn"
    theirs = {
        k: os.path.basename(v)
        if isinstance(v, str) and k in ours and type(ours[k]) is not str
        else v
        for k, v in theirs.items()
    }
    return ours, theirs


def test_every_library_yaml_is_a_case(manager):
    files = {p for folder in FOLDERS for p in (builtin_task_dir() / folder).glob("**/*.yaml")}
    files.discard(builtin_task_dir() / "gsm8k" / "gsm8k.yaml")  # covered by tests/api
    assert files == {_ours(manager, t) for t in CASES}


@pytest.mark.parametrize("task", sorted(CASES))
def test_parsed_yaml_matches_lm_eval(manager, task):
    ours, theirs = _raw(task, manager)
    assert ours == theirs


@pytest.mark.parametrize("task", sorted(CASES))
def test_task_config_matches_lm_eval(manager, task):
    from lm_eval.config.task import TaskConfig as LmEvalTaskConfig
    from lm_eval.tasks._yaml_loader import load_yaml as lm_eval_load_yaml

    from jaxeval.api.config import TaskConfig
    from jaxeval.api.yaml_loader import load_yaml

    structural = ("tag", "group", "task_list")
    ours = {k: v for k, v in load_yaml(_ours(manager, task)).items() if k not in structural}
    theirs = {k: v for k, v in lm_eval_load_yaml(_theirs(task)).items() if k not in structural}
    diff = config_differences(
        TaskConfig.from_dict(ours).to_dict(), LmEvalTaskConfig(**theirs).to_dict(), drop=()
    )
    assert not diff


def test_dump_config_always_has_fewshot_config():
    from jaxeval.api.config import TaskConfig

    assert "fewshot_config" in TaskConfig.from_dict({"task": "t", "doc_to_text": "q"}).to_dict()


def test_tags_match_lm_eval(manager):
    for task in CASES:
        ours, _ = _raw(task, manager)
        tags = ours.get("tag") or []
        for tag in [tags] if isinstance(tags, str) else tags:
            assert manager.index[tag].kind is Kind.TAG and task in manager.index[tag].tags, (
                task,
                tag,
            )


def test_cli_lists_tasks_and_tags(capsys, monkeypatch):
    from jaxeval.cli import main

    monkeypatch.setenv(
        "JAXEVAL_CATALOGUE", "0"
    )  # our library's own tags, without lm-eval's members
    assert main(["ls", "tasks"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines()[1:]:
        name, kind, source, *rest = line.split()
        assert source == "jaxeval:", line
        rows[name] = [kind, *rest]
    for task in CASES:
        assert rows[task][0] == "task", task
    for tag, members in {
        "truthfulqa": "truthfulqa_gen, truthfulqa_mc1, truthfulqa_mc2",
        "super-glue-lm-eval-v1": "boolq",
        "multiple_choice": "hellaswag",
        "self_consistency": "gsm8k_cot_self_consistency",
    }.items():
        assert rows[tag][0] == "tag" and " ".join(rows[tag][1:]) == members, tag
    assert {"gsm8k_cot", "gsm8k_cot_llama", "gsm8k_cot_self_consistency"} <= set(
        " ".join(rows["chain_of_thought"][1:]).split(", ")
    )
    assert "gsm8k_cot_zeroshot" in " ".join(rows["math_word_problems"][1:])
