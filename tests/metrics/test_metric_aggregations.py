"""Every aggregation equals lm-eval 0.4.13's on the same inputs (exact float equality)."""

import math
import random

import numpy as np
import pytest

from jaxeval.metrics import AGGREGATIONS

lm_metrics = pytest.importorskip("lm_eval.api.metrics")


def _floats(seed, n, lo=-5.0, hi=0.0):
    rng = random.Random(seed)
    return [rng.uniform(lo, hi) for _ in range(n)]


def _pairs(seed, n):
    rng = random.Random(seed)
    return [(rng.uniform(-50.0, 0.0), rng.randint(1, 40)) for _ in range(n)]


def _brier_items(seed, n, k):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        logits = rng.normal(size=k)
        probs = np.exp(logits) / np.exp(logits).sum()
        items.append((int(rng.integers(k)), probs))
    return items


def _multirc_items(seed, n):
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        doc = {
            "idx": {"paragraph": rng.randint(0, 3), "question": rng.randint(0, 5)},
            "label": rng.randint(0, 1),
        }
        items.append((rng.random() < 0.6, doc))
    return items


CASES = {
    "mean": (
        lm_metrics.mean,
        [_floats(s, n) for s, n in [(0, 1), (1, 7), (2, 1000)]] + [[1, 0, 1]],
    ),
    "median": (lm_metrics.median, [_floats(s, n) for s, n in [(3, 1), (4, 8), (5, 9), (6, 501)]]),
    "nanmean": (
        lm_metrics.nanmean,
        [_floats(7, 50), [1.0, float("nan"), 2.0], [float("nan")] * 3, [0.1] * 33],
    ),
    "perplexity": (lm_metrics.perplexity, [_floats(s, n) for s, n in [(8, 1), (9, 300)]]),
    "weighted_perplexity": (lm_metrics.weighted_perplexity, [_pairs(10, 1), _pairs(11, 200)]),
    "bits_per_byte": (lm_metrics.bits_per_byte, [_pairs(12, 1), _pairs(13, 200)]),
    "brier_score": (lm_metrics.brier_score, [_brier_items(14, 1, 2), _brier_items(15, 60, 4)]),
    "acc_all": (lm_metrics.acc_all, [_multirc_items(16, 5), _multirc_items(17, 300)]),
    "bypass": (lm_metrics.bypass_agg, [[1, 2, 3], []]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_aggregation_equals_lm_eval(name):
    reference, inputs = CASES[name]
    for xs in inputs:
        expected = reference(xs)
        got = AGGREGATIONS.get(name)(xs)
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(got)
        else:
            assert got == expected, (name, xs[:3])


def test_hand_worked_values():
    assert AGGREGATIONS.get("mean")([1, 0, 1, 1]) == 0.75
    assert AGGREGATIONS.get("median")([3, 1, 2, 5]) == 3  # upper middle, not 2.5
    assert AGGREGATIONS.get("median")([3, 1, 2]) == 2
    assert AGGREGATIONS.get("perplexity")([-1.0, -3.0]) == math.exp(2.0)
    assert AGGREGATIONS.get("weighted_perplexity")([(-4.0, 2), (-2.0, 1)]) == math.exp(2.0)
    assert AGGREGATIONS.get("bits_per_byte")([(-4.0, 2), (-2.0, 1)]) == 2.0 / math.log(2)
    assert AGGREGATIONS.get("brier_score")([(0, [0.5, 0.5])]) == 0.5
    assert AGGREGATIONS.get("brier_score")([(1, [0.0, 1.0]), (0, [0.0, 1.0])]) == 1.0
    assert math.isnan(AGGREGATIONS.get("nanmean")([]))
    assert AGGREGATIONS.get("nanmean")([1.0, float("nan"), 3.0]) == 2.0
    assert AGGREGATIONS.get("bypass")([0.3]) == 999
    # Two questions: q0 all right, q1 one wrong -> 0.5.
    q = lambda p, qid, label: {"idx": {"paragraph": p, "question": qid}, "label": label}  # noqa: E731
    items = [(True, q(0, 0, 1)), (False, q(0, 0, 0)), (True, q(0, 1, 1)), (True, q(0, 1, 0))]
    assert AGGREGATIONS.get("acc_all")(items) == 0.5


def test_mean_sums_left_to_right_like_python():
    # np.mean's pairwise summation can differ in the last bit; lm-eval uses sum()/len().
    xs = [0.1] * 10 + [1e16, -1e16]
    assert AGGREGATIONS.get("mean")(xs) == sum(xs) / len(xs)
