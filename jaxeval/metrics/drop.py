"""DROP's official exact-match and F1, as lm-eval 0.4.13's `tasks/drop/utils.py` computes them.

Use from a task YAML:

    process_docs: !function jaxeval.metrics.drop.process_docs
    process_results: !function jaxeval.metrics.drop.process_results

Answers. A raw answer `{number, date{day, month, year}, spans}` becomes a tuple of strings:

    {"number": "7", ...}                              -> ("7",)
    {"number": "", "spans": ["Tom", "Bob"], ...}      -> ("Tom", "Bob")
    {"number": "", "spans": [], "date": {"day": "5", "month": "", "year": "2010"}}
                                                      -> ("5  2010",)     (inner double space kept)

Normalisation of one span (`normalize_answer`):

    "The 1,000-yard U.S. run!"  split on " " and "-"  -> ["The", "1,000", "yard", "U.S.", "run!"]
    per token: lower; drop ASCII punctuation unless float() parses it; numbers -> str(float(t));
               drop the articles a/an/the; collapse whitespace; drop empty tokens
                                                      -> "1000.0 yard us run"

Scoring one prediction against one gold (`get_metrics`): each side is a list of spans, each span a
*set* of tokens. em = 1.0 iff the normalised span sets are equal (and equally long). F1 aligns the
bags one to one with the Hungarian algorithm, scoring a pair by token F1 (0 if the gold bag holds
numbers and the prediction shares none of them), and averages over max(#gold, #pred) slots, rounded
to 2 decimals with numpy's rounding:

    pred ["Tom and Bob"] vs gold ("Tom", "Bob"): bags {tom, and, bob} vs {tom}, {bob}
        -> one match with F1 2·(1/3·1)/(1/3+1) = 0.5, one empty slot -> mean(0.5, 0) = 0.25
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

Answer = tuple[str, ...]

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


# -- answers ------------------------------------------------------------------------------------


def parse_answer(answer: dict) -> Answer:
    """A raw DROP answer -> a tuple of strings: the number, else the spans, else the date."""
    if answer["number"] != "":
        return (str(answer["number"]),)
    if answer["spans"] != []:
        return tuple(answer["spans"])
    date = answer["date"]
    return (" ".join([date["day"], date["month"], date["year"]]).strip(),)


def _validated_answers(columns: dict) -> list[dict]:
    """The columnar `{"number": [...], "date": [...], "spans": [...]}` -> one dict per answer."""
    return [
        {"number": columns["number"][i], "date": columns["date"][i], "spans": columns["spans"][i]}
        for i in range(len(columns["number"]))
    ]


def get_answers(doc: dict) -> list[Answer]:
    """The distinct parsed answers of a document: `answer` first, then the validated answers."""
    answers: list[Answer] = []
    seen: set[Answer] = set()
    for candidate in [doc["answer"], *_validated_answers(doc["validated_answers"])]:
        answer = parse_answer(candidate)
        if answer not in seen:
            seen.add(answer)
            answers.append(answer)
    return answers


def process_doc(doc: dict) -> dict:
    """The columns DROP's `process_docs` adds: `id`, `passage`, `question`, `answers`."""
    return {
        "id": doc["query_id"],
        "passage": doc["passage"],
        "question": doc["question"],
        "answers": get_answers(doc),
    }


def process_docs(dataset: Any) -> Any:
    """`dataset.map(process_doc)` on a `datasets.Dataset`; the original columns stay.

    After Arrow, `answers` is a list of lists of str.
    """
    return dataset.map(process_doc)


# -- normalisation ------------------------------------------------------------------------------


def _is_number(text: str) -> bool:
    """Whether `float(text)` parses (so "nan", "inf", "1e3", "1_000" and " 5 " count)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _remove_punc(token: str) -> str:
    if _is_number(token):
        return token
    return "".join(ch for ch in token if ch not in _PUNCTUATION)


def _fix_number(token: str) -> str:
    return str(float(token)) if _is_number(token) else token


def _normalize_token(token: str) -> str:
    token = _fix_number(_remove_punc(token.lower()))
    token = _ARTICLES.sub(" ", token)
    return " ".join(token.split())


def normalize_answer(span: str) -> str:
    """One answer span -> its normalised form (see the module docstring)."""
    tokens = [_normalize_token(t) for t in re.split(" |-", span)]
    return " ".join(t for t in tokens if t.strip()).strip()


def answer_to_bags(answer: str | Sequence[str]) -> tuple[list[str], list[set[str]]]:
    """Spans -> (normalised spans, one token set per span); a bare string is one span."""
    spans = answer if isinstance(answer, (list, tuple)) else [answer]
    normalized = [normalize_answer(s) for s in spans]
    return normalized, [set(n.split()) for n in normalized]


# -- scoring ------------------------------------------------------------------------------------


def _bag_f1(predicted: set[str], gold: set[str]) -> float:
    """Token-set F1; an empty side has precision (or recall) 1.0."""
    overlap = len(gold & predicted)
    precision = 1.0 if not predicted else overlap / float(len(predicted))
    recall = 1.0 if not gold else overlap / float(len(gold))
    if precision == 0.0 and recall == 0.0:
        return 0.0
    return (2 * precision * recall) / (precision + recall)


def _numbers_match(gold: set[str], predicted: set[str]) -> bool:
    """True if the gold bag has no number tokens, or shares one with the prediction."""
    gold_numbers = {t for t in gold if _is_number(t)}
    predicted_numbers = {t for t in predicted if _is_number(t)}
    return not gold_numbers or bool(gold_numbers & predicted_numbers)


def align_bags(predicted: list[set[str]], gold: list[set[str]]) -> np.ndarray:
    """Per-slot F1 of the best one-to-one alignment; [max(#gold, #pred)], unmatched slots 0."""
    scores = np.zeros([len(gold), len(predicted)])  # [#gold, #pred]
    for g, gold_bag in enumerate(gold):
        for p, pred_bag in enumerate(predicted):
            if _numbers_match(gold_bag, pred_bag):
                scores[g, p] = _bag_f1(pred_bag, gold_bag)
    rows, cols = linear_sum_assignment(-scores)
    slots = np.zeros([max(len(gold), len(predicted))])
    for row, col in zip(rows, cols):
        slots[row] = max(slots[row], scores[row, col])
    return slots


def get_metrics(predicted: str | Sequence[str], gold: str | Sequence[str]) -> tuple[float, float]:
    """(exact match, F1) of one prediction against one gold answer."""
    pred_spans, pred_bags = answer_to_bags(predicted)
    gold_spans, gold_bags = answer_to_bags(gold)
    same = set(pred_spans) == set(gold_spans) and len(pred_spans) == len(gold_spans)
    em = 1.0 if same else 0.0
    f1 = round(np.mean(align_bags(pred_bags, gold_bags)), 2)  # numpy rounding, as lm-eval
    return em, f1


def process_results(doc: dict, results: Sequence[str]) -> dict[str, float]:
    """`{"em", "f1"}`: each the max over the document's non-empty golds (0 if none).

    `results` is the list holding the one filtered generation; `doc["answers"]` comes from
    `process_docs`.
    """
    max_em = 0
    max_f1 = 0
    for gold in doc["answers"]:
        em, f1 = get_metrics(results, gold)
        if gold[0].strip():
            max_em = max(max_em, em)
            max_f1 = max(max_f1, f1)
    return {"em": max_em, "f1": max_f1}
