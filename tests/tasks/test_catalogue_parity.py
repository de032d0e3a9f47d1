"""Catalogue tasks (lm-eval's own YAML, not in our library) against lm-eval, through `--data_dir`.

These are every catalogue task whose dataset has rows in tests/data (matched by `dataset_path` and
`dataset_name`, as `--data_dir` finds them), for the MMLU subjects stored there. jaxeval loads each
by name from lm-eval's installed task folder; lm-eval reads an override YAML that includes the same
file and points it at the same rows. Requests, per-document metrics and aggregates must be equal.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import TEST_DATA
from tests.tasks.oracle import (
    Case,
    assert_same_requests,
    assert_same_results,
    assert_same_samples,
    run_jaxeval,
    run_lm_eval,
    write_lm_eval_overrides,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

SUBJECTS = ("anatomy", "abstract_algebra")
NAMES = [
    "arc_challenge_chat",
    "arc_challenge_llama",
    "boolq-seq2seq",
    "super_glue-boolq-t5-prompt",
    "gsm8k_llama",
    "lambada_openai_cloze_yaml",
    "lambada_openai_mt_en",
    *(f"mmlu_{s}_continuation" for s in SUBJECTS),
    *(f"mmlu_flan_n_shot_loglikelihood_{s}" for s in SUBJECTS),
    *(f"mmlu_{s}_generative" for s in SUBJECTS),
    *(f"mmlu_flan_n_shot_generative_{s}" for s in SUBJECTS),
    *(f"mmlu_flan_cot_fewshot_{s}" for s in SUBJECTS),
]
# lm-eval draws its few-shot pool even at 0 shots; the train splits are not stored, so these
# take theirs from validation (on both sides).
POOL = {
    n: {"fewshot_split": "validation"}
    for n in ("arc_challenge_chat", "boolq-seq2seq", "super_glue-boolq-t5-prompt")
}
# (task, num_fewshot, limit): the task's own shot count, plus a few-shot run where it has a pool.
RUNS = [(n, None, 6) for n in NAMES] + [
    ("mmlu_anatomy_continuation", 3, 4),
    ("mmlu_flan_n_shot_generative_abstract_algebra", 2, 4),
]


@pytest.fixture(scope="module")
def catalogue_cases() -> dict[str, Case]:
    from jaxeval.api.data import find_local_files
    from jaxeval.api.task_manager import TaskManager

    tm = TaskManager(catalogue=True)
    cases = {}
    for name in NAMES:
        entry = tm.index[name]
        assert entry.source == "lm-eval", name  # not one of ours: read from lm-eval's folder
        cfg = tm.task_config(name)
        splits = [
            s
            for s in (cfg.training_split, cfg.validation_split, cfg.test_split, cfg.fewshot.split)
            if s
        ]
        found = find_local_files(
            str(TEST_DATA),
            dataset_path=cfg.dataset_path,
            dataset_name=cfg.dataset_name,
            splits=splits,
        )
        assert found, name
        files = {split: os.path.relpath(path, TEST_DATA) for split, path in found.items()}
        rel = os.path.relpath(entry.yaml_path, tm.catalogue_dir)
        cases[name] = Case(name, rel, TEST_DATA, files, POOL.get(name, {}))
    return cases


@pytest.fixture(scope="module")
def lm_eval_catalogue(tmp_path_factory, catalogue_cases):
    from lm_eval.tasks import TaskManager

    out = tmp_path_factory.mktemp("lm_eval_catalogue_overrides")
    write_lm_eval_overrides(list(catalogue_cases.values()), out)
    return TaskManager(include_path=str(out))


def test_dozens_of_catalogue_tasks_are_covered():
    assert len(NAMES) >= 15


@pytest.mark.parametrize("task,num_fewshot,limit", RUNS)
def test_catalogue_task_matches_lm_eval(
    catalogue_cases, lm_eval_catalogue, task, num_fewshot, limit
):
    case = catalogue_cases[task]
    theirs, their_log = run_lm_eval(lm_eval_catalogue, case, num_fewshot, limit, log_samples=True)
    ours, our_log = run_jaxeval(case, num_fewshot, limit, log_samples=True)
    assert_same_requests(our_log, their_log)
    assert_same_results(ours, theirs, task)
    assert_same_samples(ours, theirs, task)
