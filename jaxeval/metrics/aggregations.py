"""Corpus-level aggregations: a list of per-document values -> one number.

Each function reproduces lm-eval 0.4.13 (`lm_eval/api/metrics.py`) to the bit, which pins down the
summation order: `mean` is Python's left-to-right `sum(xs) / len(xs)`, never `np.mean` (pairwise
summation can differ in the last bit); `nanmean`, `brier_score` and `acc_all` use numpy because
lm-eval does.

    mean([1, 0, 1, 1])                           -> 0.75
    median([3, 1, 2, 5])                         -> 3        (sorted(xs)[len(xs) // 2], no averaging)
    perplexity([-1.0, -3.0])                     -> exp(2.0)
    weighted_perplexity([(-4.0, 2), (-2.0, 1)])  -> exp(6 / 3)          (per (loglikelihood, weight))
    bits_per_byte([(-4.0, 2), (-2.0, 1)])        -> 2 / ln 2
    brier_score([(0, [0.5, 0.5])])               -> 0.5      (per (gold index, probabilities))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def mean(xs: Sequence[float]) -> float:
    """`sum(xs) / len(xs)`, summed left to right like lm-eval."""
    return sum(xs) / len(xs)


def median(xs: Sequence[float]) -> float:
    """The upper median: `sorted(xs)[len(xs) // 2]` (lm-eval does not average the middle pair)."""
    return sorted(xs)[len(xs) // 2]


def nanmean(xs: Sequence[float]) -> float:
    """`np.nanmean`, or NaN when `xs` is empty or all NaN (without numpy's warning)."""
    if len(xs) == 0 or all(np.isnan(xs)):
        return np.nan
    return np.nanmean(xs)


def perplexity(loglikelihoods: Sequence[float]) -> float:
    """`exp(-mean(ll))` over per-document loglikelihoods."""
    return math.exp(-mean(loglikelihoods))


def weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    """`Σ value / Σ weight` over `(value, weight)` pairs."""
    values, weights = zip(*pairs)
    return sum(values) / sum(weights)


def weighted_perplexity(pairs: Sequence[tuple[float, float]]) -> float:
    """`exp(-Σll / Σcount)` over `(loglikelihood, words or bytes)` pairs."""
    return math.exp(-weighted_mean(pairs))


def bits_per_byte(pairs: Sequence[tuple[float, float]]) -> float:
    """`-Σll / Σbytes / ln 2` over `(loglikelihood, bytes)` pairs."""
    return -weighted_mean(pairs) / math.log(2)


def brier_score(pairs: Sequence[tuple[int, Sequence[float]]]) -> float:
    """Mean over documents of `Σ_k (p_k - onehot(gold)_k)²`; pairs are `(gold, probs)`.

    Every document must have the same number of choices (lm-eval builds one documents × choices
    array).
    """
    golds, probs = zip(*pairs)
    num_class = np.array(probs).shape[1]
    one_hot = np.eye(num_class)[list(golds)]  # one row per document, one column per choice
    return np.mean(np.sum((probs - one_hot) ** 2, axis=1))


def _question_correct(pairs: Sequence[tuple[Any, dict]], key) -> list[int]:
    """1 per question whose answers were all predicted right; `pairs` are `(pred, doc)`."""
    by_question: dict[Any, list[bool]] = {}
    for pred, doc in pairs:
        gold = doc["label"] == 1
        by_question.setdefault(key(doc), []).append(gold == pred)
    return [int(all(v)) for v in by_question.values()]


def acc_all(pairs: Sequence[tuple[Any, dict]]) -> float:
    """MultiRC accuracy: a question counts only if every answer option is labelled right.

    Questions are keyed by `(doc["idx"]["paragraph"], doc["idx"]["question"])`.
    """
    return np.mean(
        _question_correct(pairs, lambda d: (d["idx"]["paragraph"], d["idx"]["question"]))
    )


def acc_all_question_scores(pairs: Sequence[tuple[Any, dict]]) -> list[int]:
    """Per-question 0/1 scores keyed by `doc["idx"]["question"]` alone (lm-eval's stderr quirk)."""
    return _question_correct(pairs, lambda d: d["idx"]["question"])


def bypass(xs: Sequence[Any]) -> int:
    """The placeholder aggregation: always 999."""
    return 999
