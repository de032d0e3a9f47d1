"""DROP EM/F1 equal lm-eval 0.4.13's `tasks/drop/utils.py` on every stored validation doc."""

import json

import numpy as np
import pytest

from jaxeval.metrics import drop
from tests.helpers.copy_rows import ROWS

lm_drop = pytest.importorskip("lm_eval.tasks.drop.utils")


@pytest.fixture(scope="module")
def docs(data_root):
    with (data_root / "drop/validation.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _predictions(doc, answers):
    """Many prediction strings per doc, exercising every normalisation and scoring branch."""
    preds = ["", "12345", "the", "-5", "3.5", "1,000", "5 yards", "N/A.", "nan", "1e3"]
    for gold in answers:
        spans = list(gold)
        preds += spans
        preds += [" and ".join(spans), ", ".join(spans), spans[0] + " yards", "the " + spans[0]]
        preds += [
            spans[0].upper() + ".",
            spans[0] + "-" + spans[0],
            f" {spans[0]}\n",
            "a " + spans[0],
        ]
        for s in spans:
            if s.replace(",", "").replace(".", "").isdigit():
                preds += [f"{float(s.replace(',', '')):,.1f}", "-" + s, s + ".0"]
    date = doc["answer"]["date"]
    preds.append(" ".join(v for v in (date["month"], date["day"], date["year"]) if v))
    return preds


def test_get_answers_equal_lm_eval(docs):
    assert len(docs) == ROWS["drop/validation.jsonl"]
    for doc in docs:
        assert drop.get_answers(doc) == lm_drop.get_answers(doc)
        for answer in [doc["answer"], *drop._validated_answers(doc["validated_answers"])]:
            assert drop.parse_answer(answer) == lm_drop.parse_answer(answer)


def test_process_docs_equal_lm_eval(docs):
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(docs)
    ours = drop.process_docs(dataset)
    theirs = lm_drop.process_docs(dataset)
    assert ours.column_names == theirs.column_names
    assert ours.to_list() == theirs.to_list()


def test_process_results_equal_lm_eval_on_every_doc(docs):
    checked = 0
    for doc in docs:
        answers = lm_drop.get_answers(doc)
        processed = {**doc, "answers": [list(a) for a in answers]}  # list-of-lists, as after Arrow
        for pred in _predictions(doc, answers):
            expected = lm_drop.process_results(processed, [pred])
            got = drop.process_results(processed, [pred])
            assert got == expected, (doc["query_id"], pred)
            assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]
            checked += 1
        for gold in answers:  # multi-span predictions (a list of several strings)
            multi = [*gold, "extra"]
            assert drop.process_results(processed, multi) == lm_drop.process_results(
                processed, multi
            )
            rev = list(reversed(gold))
            assert drop.process_results(processed, rev) == lm_drop.process_results(processed, rev)
    assert checked > len(docs) * 15


def test_normalize_answer_equals_lm_eval():
    spans = [
        "The 1,000-yard U.S. run!",
        "a\nb",
        "  Jean-Luc  Picard ",
        "-5",
        "3.50",
        "nan",
        "inf",
        "1_000",
        "Ünïcödé – dash",
        "an apple a day",
        "",
        "...",
        "1e3 yards",
    ]
    for s in spans:
        assert drop.normalize_answer(s) == lm_drop._normalize(s), s
    assert drop.normalize_answer("The 1,000-yard U.S. run!") == "1000.0 yard us run"
    assert drop.normalize_answer("-5") == "5.0"  # the hyphen splits: the sign is lost
    assert drop.normalize_answer("a\nb") == "b"


CASES = [
    # (prediction, gold, em, f1)
    (" 3 touchdowns", ("3",), 0.0, 0.67),  # 2·(1/2·1)/(1/2 + 1)
    ("Tom and Bob", ("Tom", "Bob"), 0.0, 0.25),  # one bag aligned to one gold span; 2 slots
    (["Bob", "Tom"], ("Tom", "Bob"), 1.0, 1.0),  # span order does not matter
    (["Tom", "Bob", "Ann"], ("Tom", "Bob"), 0.0, 0.67),  # an extra predicted span costs a slot
    ("6 yards", ("5 yards",), 0.0, 0.0),  # numbers must match despite the shared token
    ("1,000", ("1000",), 1.0, 1.0),
    ("-5", ("5",), 1.0, 1.0),
    ("3.5", ("3.50",), 1.0, 1.0),
    ("the Raiders", ("Raiders",), 1.0, 1.0),
    ("U.S.", ("us",), 1.0, 1.0),
    ("", ("Chaz Schilens",), 0.0, 0.0),
    ("Chaz", ("Chaz Schilens",), 0.0, 0.67),
    ("the the", ("",), 1.0, 1.0),  # both normalise to nothing
]


@pytest.mark.parametrize("pred,gold,em,f1", CASES)
def test_get_metrics_hand_worked(pred, gold, em, f1):
    assert drop.get_metrics(pred, gold) == (em, f1)
    assert drop.get_metrics(pred, gold) == lm_drop.get_metrics(pred, gold)
    assert isinstance(drop.get_metrics(pred, gold)[1], np.float64)


def test_process_results_branches():
    # Empty golds are skipped even when they would match; the rest are maxed independently.
    doc = {"answers": [("",), ("7",), ("seven days",)]}
    assert drop.process_results(doc, [""]) == {"em": 0, "f1": 0}
    assert drop.process_results(doc, ["seven"]) == {"em": 0.0, "f1": 0.67}
    assert drop.process_results(doc, ["7"]) == {"em": 1.0, "f1": 1.0}
    assert drop.process_results({"answers": [("",)]}, ["x"]) == {"em": 0, "f1": 0}
    for pred in ["", "seven", "7", "x"]:
        assert drop.process_results(doc, [pred]) == lm_drop.process_results(doc, [pred])


def test_parse_answer_branches():
    blank = {"day": "", "month": "", "year": ""}
    assert drop.parse_answer({"number": "7", "spans": ["x"], "date": blank}) == ("7",)
    assert drop.parse_answer({"number": "", "spans": ["Tom", "Bob"], "date": blank}) == (
        "Tom",
        "Bob",
    )
    date = {"day": "5", "month": "", "year": "2010"}
    assert drop.parse_answer({"number": "", "spans": [], "date": date}) == ("5  2010",)
    assert drop.parse_answer({"number": "", "spans": [], "date": blank}) == ("",)
    doc = {
        "answer": {"number": "3", "spans": [], "date": blank},
        "validated_answers": {"number": ["3", ""], "spans": [[], ["x"]], "date": [blank, blank]},
    }
    assert drop.get_answers(doc) == [("3",), ("x",)]  # the duplicate "3" is dropped
