"""Each library task against lm-eval 0.4.13's own YAML, with the same fake model on both sides.

Requests (contexts, continuations, generation kwargs) must be identical, and so must every metric,
stderr, n-shot, version and the dumped config (helpers compared by name). Tasks with rows in
tests/data run on them; the others (TriviaQA, TruthfulQA, OpenBookQA, SciQ) run on the few
hand-written rows in tests/tasks/data, laid out like the hub.
"""

from __future__ import annotations

import pytest

from tests.tasks.cases import CASES, RUNS
from tests.tasks.oracle import (
    assert_same_requests,
    assert_same_results,
    assert_same_samples,
    run_jaxeval,
    run_lm_eval,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]


def test_every_case_is_run():
    assert {t for t, _, _ in RUNS} == set(CASES)


@pytest.mark.parametrize(
    "case", [c for c in CASES.values() if c.via == "data_dir"], ids=lambda c: c.task
)
def test_data_dir_finds_the_same_files(case):
    from jaxeval.api.task_manager import TaskManager

    task = TaskManager(data_dir=str(case.root)).load([case.task]).tasks[case.task]
    assert task._data_files == case.paths()


@pytest.mark.parametrize("task,num_fewshot,limit", RUNS)
def test_requests_and_metrics_match_lm_eval(lm_eval_manager, task, num_fewshot, limit):
    case = CASES[task]
    theirs, their_log = run_lm_eval(lm_eval_manager, case, num_fewshot, limit, log_samples=True)
    ours, our_log = run_jaxeval(case, num_fewshot, limit, log_samples=True)
    assert_same_requests(our_log, their_log)
    assert_same_results(ours, theirs, task)
    assert_same_samples(ours, theirs, task)
