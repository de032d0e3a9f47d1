"""Group scores and stderrs equal lm-eval's aggregate_subtask_metrics / pooled_sample_stderr."""

import math
import random

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.metrics import aggregate_subtask_metrics, pooled_sample_stderr, unweighted_mean_stderr

lm_metrics = pytest.importorskip("lm_eval.api.metrics")


def _groups(seed, k):
    rng = random.Random(seed)
    scores = [rng.random() for _ in range(k)]
    stderrs = [rng.uniform(0.001, 0.05) for _ in range(k)]
    sizes = [rng.randint(2, 5000) for _ in range(k)]
    return scores, stderrs, sizes


@pytest.mark.parametrize("seed,k", [(0, 1), (1, 2), (2, 5), (3, 57)])
def test_equal_lm_eval(seed, k):
    scores, stderrs, sizes = _groups(seed, k)
    for weight in (True, False):
        assert aggregate_subtask_metrics(
            scores, sizes, weight
        ) == lm_metrics.aggregate_subtask_metrics(scores, sizes, weight)
    assert aggregate_subtask_metrics(scores, sizes) == lm_metrics.aggregate_subtask_metrics(
        scores, sizes
    )
    if k > 1 or sizes[0] > 1:
        assert pooled_sample_stderr(stderrs, sizes) == lm_metrics.pooled_sample_stderr(
            stderrs, sizes
        )
    assert unweighted_mean_stderr(stderrs) == lm_metrics.unweighted_mean_stderr(stderrs)


def test_hand_worked():
    assert aggregate_subtask_metrics([0.5, 1.0], [2, 6]) == 0.875
    assert aggregate_subtask_metrics([0.5, 1.0], [2, 6], weight_by_size=False) == 0.75
    # Equal sizes n, equal stderr s: sqrt(k(n-1)·s²·n / (kn - k) / kn) = s / sqrt(k).
    assert math.isclose(
        pooled_sample_stderr([0.1, 0.1], [10, 10]), 0.1 / math.sqrt(2), rel_tol=1e-15
    )
    assert unweighted_mean_stderr([0.3, 0.4]) == 0.25


def test_length_mismatch_is_an_error():
    with pytest.raises(JaxevalError):
        aggregate_subtask_metrics([0.1], [1, 2])
    with pytest.raises(JaxevalError):
        pooled_sample_stderr([0.1, 0.2], [1])
