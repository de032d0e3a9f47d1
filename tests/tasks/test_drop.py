"""DROP per-document scores against lm-eval's `tasks/drop/utils.py`, on the stored DROP rows.

Two routes, both over every stored question (the first 100, tests/data/drop):
* end to end: both evaluators run `drop` with the same DROP-shaped fake generations
  (tests/tasks/fake_lm.py); every document's filtered answer, em and f1 must be identical;
* direct: answers written from each document's own golds (multi-span joins, articles, thousands
  separators, units, signs, case, empties) go through our task's `process_results` and lm-eval's.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.helpers.copy_rows import ROWS
from tests.tasks.cases import CASES
from tests.tasks.oracle import lm_eval_tasks_dir, run_jaxeval, run_lm_eval

pytestmark = [pytest.mark.oracle, pytest.mark.slow]
NUM_DOCS = ROWS["drop/validation.jsonl"]


def _lm_eval_drop_utils():
    path = os.path.join(lm_eval_tasks_dir(), "drop", "utils.py")
    spec = importlib.util.spec_from_file_location("lm_eval_drop_utils_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prediction_variants(golds: list) -> list[str]:
    """Answers a model might give for a document whose gold answers are `golds` (tuples of str)."""
    first = list(golds[0])
    out = [
        " ".join(first),
        " and ".join(first),
        ", ".join(first),
        "the " + first[0],
        first[0].upper(),
        f"{first[0]} points",
        "",
        "  ",
        f"The answer is {first[-1]}.",
        " ".join(golds[-1]),
    ]
    head = first[0].replace(",", "")
    try:
        number = float(head)
    except ValueError:
        number = None
    if number is not None:
        out += [f"{number:,.0f}", f"-{head}", f"{head}.0", f"{number + 1:g}", f"{head} and {head}"]
    return out


@pytest.fixture(scope="module")
def drop_docs(data_root):
    """(our processed docs, lm-eval's processed docs) for the whole validation sample."""
    import datasets

    from jaxeval.api.task_manager import TaskManager

    ours = TaskManager(data_dir=str(data_root)).load(["drop"]).tasks["drop"].eval_docs
    raw = datasets.load_dataset(
        "json", data_files={"validation": str(data_root / "drop/validation.jsonl")}
    )
    theirs = [dict(d) for d in _lm_eval_drop_utils().process_docs(raw["validation"])]
    assert len(ours) == len(theirs) == NUM_DOCS
    return ours, theirs


def test_processed_docs_match(drop_docs):
    ours, theirs = drop_docs
    assert ours == theirs


def test_scores_of_gold_derived_answers_match(drop_docs):
    from jaxeval.api.task_manager import TaskManager

    task = TaskManager(data_dir=str(CASES["drop"].root)).load(["drop"]).tasks["drop"]
    lm_utils = _lm_eval_drop_utils()
    ours, theirs = drop_docs
    seen_em, seen_partial = 0, 0
    for our_doc, their_doc in zip(ours, theirs):
        for pred in prediction_variants(their_doc["answers"]):
            got = task.process_results(our_doc, [pred])
            want = lm_utils.process_results(their_doc, [pred])
            assert got == want, (their_doc["query_id"], pred, got, want)
            seen_em += got["em"] == 1.0
            seen_partial += 0 < got["f1"] < 1
    assert seen_em > NUM_DOCS and seen_partial > NUM_DOCS  # the variants exercise both outcomes


def test_end_to_end_per_document_scores_match(lm_eval_manager):
    case = CASES["drop"]
    theirs, _ = run_lm_eval(lm_eval_manager, case, 0, None, log_samples=True)
    ours, _ = run_jaxeval(case, 0, None, log_samples=True)
    a, b = ours["samples"]["drop"], theirs["samples"]["drop"]
    assert len(a) == len(b) == NUM_DOCS
    for x, y in zip(a, b):
        assert x["doc_id"] == y["doc_id"]
        assert x["filtered_resps"] == y["filtered_resps"], x["doc_id"]
        assert (x["em"], x["f1"]) == (y["em"], y["f1"]), (x["doc_id"], x["filtered_resps"])
    assert any(s["f1"] > 0 for s in a)
