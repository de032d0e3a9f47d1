"""McNemar's exact test and the paired t-test against scipy, and the docstring's worked example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from jaxeval.report.stats import mcnemar_exact, paired_t


def test_docstring_example():
    assert mcnemar_exact(3, 1) == pytest.approx(0.625)


@pytest.mark.parametrize("b, c", [(0, 0), (0, 1), (5, 5), (3, 12), (40, 25), (1, 0), (300, 340)])
def test_mcnemar_is_scipys_two_sided_binomial_test(b, c):
    expected = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_paired_t_is_scipys():
    rng = np.random.default_rng(0)
    a = rng.random(30)
    b = a + rng.normal(0.05, 0.1, 30)
    t, p = paired_t(list(b - a))
    ref = stats.ttest_rel(b, a)
    assert t == pytest.approx(ref.statistic, rel=1e-10)
    assert p == pytest.approx(ref.pvalue, rel=1e-8)


def test_paired_t_edges():
    assert paired_t([0.0, 0.0, 0.0]) == (0.0, 1.0)
    assert paired_t([0.25, 0.25]) == (math.inf, 0.0)
    assert paired_t([0.5]) == (0.0, 1.0)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)
