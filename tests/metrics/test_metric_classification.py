"""Binary F1 and MCC equal lm-eval's aggregations, which call scikit-learn (exact equality)."""

import random

import numpy as np
import pytest

from jaxeval.errors import JaxevalError
from jaxeval.metrics import AGGREGATIONS

lm_metrics = pytest.importorskip("lm_eval.api.metrics")
pytest.importorskip("sklearn")
# sklearn warns on single-label and zero-division inputs; the values are what we compare.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _random_pairs(seed, n, labels):
    rng = random.Random(seed)
    return [(rng.choice(labels), rng.choice(labels)) for _ in range(n)]


BINARY = [_random_pairs(s, n, [0, 1]) for s, n in [(0, 1), (1, 2), (2, 10), (3, 97), (4, 1000)]] + [
    [(0, 0)] * 5,  # no positive anywhere: 0.0 (zero division)
    [(1, 1)] * 5,  # one class only
    [(1, 0)] * 3,  # positives never predicted
    [(0, 1)] * 3,  # predicted, never true
    [(1, 1), (0, 1), (1, 0), (0, 0)],
    [(True, True), (False, True), (True, False)],
]
MULTICLASS = [_random_pairs(s, n, [0, 1, 2, 3]) for s, n in [(5, 3), (6, 50), (7, 400)]] + [
    [(2, 2)] * 4,
    [(0, 3), (3, 0), (1, 1)],
    _random_pairs(8, 30, ["a", "b", "c"]),
]


@pytest.mark.parametrize("i", range(len(BINARY)))
def test_f1_equals_sklearn(i):
    assert AGGREGATIONS.get("f1")(BINARY[i]) == lm_metrics.f1_score(BINARY[i])


@pytest.mark.parametrize("i", range(len(BINARY + MULTICLASS)))
def test_mcc_equals_sklearn(i):
    items = (BINARY + MULTICLASS)[i]
    assert AGGREGATIONS.get("matthews_corrcoef")(items) == lm_metrics.matthews_corrcoef(items)


def test_hand_worked():
    f1 = AGGREGATIONS.get("f1")
    mcc = AGGREGATIONS.get("matthews_corrcoef")
    assert f1([(1, 1), (1, 0), (0, 1), (0, 0)]) == 0.5  # 2·1 / (2 + 2)
    assert f1([(1, 1), (1, 1), (0, 1)]) == 0.8  # 2·2 / (2 + 3)
    assert f1([(0, 0), (0, 0)]) == 0.0
    assert mcc([(1, 1), (0, 0)]) == 1.0
    assert mcc([(1, 0), (0, 1)]) == -1.0
    assert mcc([(1, 1), (1, 1)]) == 0.0  # zero denominator


def test_f1_is_a_float64_as_lm_evals():
    # Python 3.12's `sum` compensates Python floats only: lm-eval's np.float64 f1 values are added
    # left to right, and so must ours be (the bootstrap stderr sums them).
    for pairs in (BINARY[0], [(0, 0), (0, 0)]):
        assert type(AGGREGATIONS.get("f1")(pairs)) is type(lm_metrics.f1_score(pairs)) is np.float64


def test_f1_rejects_what_sklearn_rejects():
    with pytest.raises(JaxevalError, match="binary"):
        AGGREGATIONS.get("f1")([(0, 1), (2, 0)])
    with pytest.raises(ValueError):
        lm_metrics.f1_score([(0, 1), (2, 0)])
    with pytest.raises(JaxevalError, match="positive label 1"):
        AGGREGATIONS.get("f1")([(0, 2), (2, 0)])
    with pytest.raises(ValueError):
        lm_metrics.f1_score([(0, 2), (2, 0)])
