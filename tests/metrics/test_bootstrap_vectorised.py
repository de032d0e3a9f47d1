"""The block bootstrap equals lm-eval 0.4.13's, replicate for replicate, with `==` on floats.

lm-eval runs single-process here (DISABLE_MULTIPROC): its pool gives the same numbers but forks,
which is unsafe once JAX threads run in the test session.
"""

import math
import random
import sys

import numpy as np
import pytest

from jaxeval.metrics import AGGREGATIONS, bootstrap_stderr
from jaxeval.metrics import replicate_stats as rs
from jaxeval.metrics.replicate_stats import (
    SEQUENTIAL_FLOAT_SUM,
    block_statistic,
    sequential_row_sums,
)
from jaxeval.metrics.stderr import (
    bootstrap_replicates,
    bootstrap_replicates_reference,
    stderr_for_aggregation,
)

lm_metrics = pytest.importorskip("lm_eval.api.metrics")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_rng = random.Random(20261205)


def lambada_lls(n: int) -> list[float]:
    """Target-word loglikelihoods: mostly -0.1 to -10, a long tail below."""
    return [-_rng.lognormvariate(0.4, 1.1) for _ in range(n)]


def rolling_pairs(n: int, unit: str) -> list[tuple[float, int]]:
    """WikiText-like documents: (loglikelihood, words or bytes), thousands of nats each."""
    out = []
    for _ in range(n):
        words = _rng.randint(40, 3000)
        count = words if unit == "words" else int(words * _rng.uniform(4.5, 6.5))
        out.append((-words * _rng.uniform(2.0, 4.5), count))
    return out


_WORDS = (
    "the a cat dog sat ran on under mat table house river quickly slowly red blue old new man "
    "woman child saw took gave"
).split()


def translations(n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        ref = [_rng.choice(_WORDS) for _ in range(_rng.randint(6, 14))]
        pred = [
            w if _rng.random() < 0.7 else _rng.choice(_WORDS) for w in ref if _rng.random() < 0.9
        ]
        out.append((" ".join(ref), " ".join(pred)))
    return out


LLS = lambada_lls(2000)
WORD_PAIRS = rolling_pairs(300, "words")
BYTE_PAIRS = rolling_pairs(300, "bytes")
SCORES = [_rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) + _rng.random() * 1e-3 for _ in range(800)]
INT_SCORES = [_rng.randint(0, 9) for _ in range(801)]
NANS = [float("nan") if _rng.random() < 0.1 else _rng.random() for _ in range(1500)]
ACCS = [_rng.randint(0, 1) for _ in range(1500)]
BINARY = [
    (g, g if _rng.random() < 0.8 else 1 - g) for g in (_rng.randint(0, 1) for _ in range(300))
]
MULTI = [
    (g, g if _rng.random() < 0.6 else _rng.randint(0, 2))
    for g in (_rng.randint(0, 2) for _ in range(300))
]
TRANSLATIONS = translations(30)

# case -> (aggregation name, lm-eval's aggregation function, data)
VECTORISED = {
    "perplexity": ("perplexity", lm_metrics.perplexity, LLS),
    "word_perplexity": ("weighted_perplexity", lm_metrics.weighted_perplexity, WORD_PAIRS),
    "byte_perplexity": ("weighted_perplexity", lm_metrics.weighted_perplexity, BYTE_PAIRS),
    "bits_per_byte": ("bits_per_byte", lm_metrics.bits_per_byte, BYTE_PAIRS),
    "mean_of_floats": ("mean", lm_metrics.mean, LLS),
    "mean_of_ints": ("mean", lm_metrics.mean, ACCS),
    "median": ("median", lm_metrics.median, SCORES),
    "median_of_ints": ("median", lm_metrics.median, INT_SCORES),
    "nanmean": ("nanmean", lm_metrics.nanmean, NANS),
}
PER_REPLICATE = {
    "f1": ("f1", lm_metrics.f1_score, BINARY),
    "matthews_corrcoef": ("matthews_corrcoef", lm_metrics.matthews_corrcoef, MULTI),
    "bleu": ("bleu", lm_metrics.bleu, TRANSLATIONS),
    "chrf": ("chrf", lm_metrics.chrf, TRANSLATIONS),
    "chrf++": ("chrf++", lm_metrics.chrfpp, TRANSLATIONS),
    "ter": ("ter", lm_metrics.ter, TRANSLATIONS),
}


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")


def assert_equals_lm_eval(name, lm_agg, xs, iters, *, same_types=True):
    f = AGGREGATIONS.get(name)
    expected = lm_metrics._bootstrap_internal_no_mp(lm_agg, xs, iters)
    got = bootstrap_replicates(f, xs, iters)
    assert got == expected or (  # NaN != NaN: compare those by position
        len(got) == len(expected)
        and all(a == b or (a != a and b != b) for a, b in zip(got, expected))
    )
    if same_types:  # float or numpy float64, as lm-eval's statistic returns it
        assert [type(x) for x in got] == [type(x) for x in expected]
    stderr = bootstrap_stderr(f, xs, iters)
    assert stderr == lm_metrics.bootstrap_stderr(lm_agg, xs, iters)


def test_interpreter_sum_is_detected():
    assert SEQUENTIAL_FLOAT_SUM == (sys.version_info < (3, 12))
    assert SEQUENTIAL_FLOAT_SUM == (sum([1e16, 1.0, -1e16]) == 0.0)


@pytest.mark.parametrize("case", sorted(VECTORISED))
def test_block_path_is_taken(case):
    name, _, xs = VECTORISED[case]
    sum_based = name not in ("median", "nanmean")
    taken = block_statistic(AGGREGATIONS.get(name), xs) is not None
    assert taken == (SEQUENTIAL_FLOAT_SUM or not sum_based)


@pytest.mark.parametrize("case", sorted(PER_REPLICATE))
def test_other_aggregations_run_per_replicate(case):
    name, _, xs = PER_REPLICATE[case]
    assert block_statistic(AGGREGATIONS.get(name), xs) is None


@pytest.mark.parametrize("case", sorted(VECTORISED))
def test_vectorised_equals_lm_eval_at_1000(case):
    name, lm_agg, xs = VECTORISED[case]
    assert_equals_lm_eval(name, lm_agg, xs, 1000)


@pytest.mark.parametrize("case", ["perplexity", "byte_perplexity", "median", "nanmean"])
def test_vectorised_equals_lm_eval_across_chunks(case):
    name, lm_agg, xs = VECTORISED[case]
    assert_equals_lm_eval(name, lm_agg, xs[:150], 3500)  # 3 seeds, blocks, 500 dropped


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(PER_REPLICATE))
def test_per_replicate_equals_lm_eval_at_1000(case):
    # Every replicate goes through sklearn or sacrebleu on lm-eval's side: 2-20 s each. (jaxeval's
    # own f1 returns a float where sklearn's returns a float64: equal values, other types.)
    name, lm_agg, xs = PER_REPLICATE[case]
    assert_equals_lm_eval(name, lm_agg, xs, 1000, same_types=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,docs", [("perplexity", 5153), ("word_perplexity", 1000), ("bits_per_byte", 1000)]
)
def test_perplexity_family_equals_lm_eval_at_100000(case, docs):
    # lm-eval's default bootstrap_iters. Perplexity on LAMBADA's 5,153 documents takes lm-eval
    # 30-40 s; its weighted aggregations cost 3.5x more per document (and lm-eval reports no
    # bootstrap stderr for them), so they run on 1,000 documents: ~25 s.
    name, lm_agg, _ = VECTORISED[case]
    rng = random.Random(case)
    lls = [-rng.lognormvariate(0.4, 1.1) for _ in range(docs)]
    xs = lls if name == "perplexity" else [(ll, rng.randint(1, 40)) for ll in lls]
    expected = lm_metrics.bootstrap_stderr(lm_agg, xs, 100_000)
    if name == "perplexity":  # the results table's path; the weighted ones get "N/A" there
        assert stderr_for_aggregation(name, 100_000)(xs) == expected
    else:
        assert stderr_for_aggregation(name, 100_000) is None
        assert bootstrap_stderr(AGGREGATIONS.get(name), xs, 100_000) == expected


# --- the pieces, on data chosen to expose a wrong summation order -------------------------------


def _hard_values(n: int, rng: random.Random) -> list[float]:
    """Magnitudes from 1e-8 to 1e16 with both signs: pairwise or compensated sums differ."""
    out = []
    for _ in range(n):
        out.append(rng.choice([-1, 1]) * rng.random() * 10 ** rng.randint(-8, 16))
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 127, 128, 129, 1000, 4097])
def test_row_sums_equal_python_sum(n):
    rng = random.Random(n)
    values = _hard_values(n, rng) + [1e16, 1.0, -1e16, -0.0]
    block = np.array([[rng.randrange(len(values)) for _ in range(n)] for _ in range(40)])
    got = sequential_row_sums(np.array(values), block).tolist()
    expected = [sum(values[j] for j in row) for row in block.tolist()]
    assert got == expected
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in expected]
    # Pairwise summation (NumPy's along a row) would not do: the data tells the two apart.
    if n >= 9:
        assert np.sum(np.array(values)[block], axis=1).tolist() != expected


def test_row_sums_special_values():
    values = [-0.0, 1.5, math.inf, -math.inf, math.nan, 2.0**-1074, 1e308]
    block = np.array([[0, 0, 0], [0, 1, 0], [2, 1, 2], [2, 3, 1], [4, 1, 1], [5, 5, 0], [6, 6, 3]])
    got = sequential_row_sums(np.array(values), block).tolist()
    expected = [sum(values[j] for j in row) for row in block.tolist()]
    assert str(got) == str(expected)  # -0.0 vs 0.0 and nan spelled out
    assert math.copysign(1, got[0]) == 1.0  # Python's sum of -0.0s is 0.0


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 128, 129, 1000, 5153])
def test_nanmean_rows_equal_np_nanmean(n):
    rng = random.Random(n)
    xs = [math.nan if rng.random() < 0.3 else x for x in _hard_values(n, rng)]
    if n > 1:
        xs[0] = math.nan
    statistic = block_statistic(AGGREGATIONS.get("nanmean"), xs)
    block = np.array([[rng.randrange(n) for _ in range(n)] for _ in range(30)])
    got = statistic(block)
    expected = [AGGREGATIONS.get("nanmean")([xs[j] for j in row]) for row in block.tolist()]
    assert str(got) == str(expected)
    assert [type(x) for x in got] == [type(x) for x in expected]


def test_median_rows_equal_sorted_middle():
    rng = random.Random(3)
    for xs in (
        [rng.choice([1.5, -2.0, 3.25, 0.0]) for _ in range(31)],  # heavy ties
        [rng.randint(-5, 5) for _ in range(40)],
        [rng.random() < 0.5 for _ in range(25)],
        [rng.random() for _ in range(128)],  # ranks fill int8 exactly
        [rng.random() for _ in range(129)],  # the first size that needs int16
    ):
        statistic = block_statistic(AGGREGATIONS.get("median"), xs)
        block = np.array([[rng.randrange(len(xs)) for _ in xs] for _ in range(50)])
        got = statistic(block)
        expected = [sorted(xs[j] for j in row)[len(xs) // 2] for row in block.tolist()]
        assert got == expected
        assert [type(x) for x in got] == [type(x) for x in expected]


# --- inputs the block path leaves to the aggregation, and edge cases ------------------------------


FALLBACKS = {
    "float32 values": ("perplexity", [np.float32(x) for x in LLS[:80]]),
    "float64 values": ("perplexity", [np.float64(x) for x in LLS[:80]]),
    "huge ints": ("mean", [2**60 + i for i in range(50)]),
    "float weights as strings": ("bits_per_byte", [(x, "3") for x in LLS[:2]]),
    "dict pairs": ("weighted_perplexity", [{"a": 1, "b": 2}] * 3),
    "median mixed types": ("median", [1, 2.0, 3, 0.5] * 10),
    "median signed zeros": ("median", [0.0, -0.0, 1.0, -1.0] * 10),
    "median nan": ("median", [0.5, math.nan, 0.25] * 10),
    "nanmean ints": ("nanmean", [1, 0, 1, 1] * 10),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_fallbacks_equal_the_reference(case):
    name, xs = FALLBACKS[case]
    f = AGGREGATIONS.get(name)
    assert block_statistic(f, xs) is None
    try:
        expected = bootstrap_replicates_reference(f, xs, 300)
    except Exception as e:  # noqa: BLE001 - the same error must come out
        with pytest.raises(type(e)):
            bootstrap_replicates(f, xs, 300)
        return
    got = bootstrap_replicates(f, xs, 300)
    assert str(got) == str(expected)
    assert [type(x) for x in got] == [type(x) for x in expected]


def test_zero_total_weight_raises_like_the_aggregation():
    f = AGGREGATIONS.get("weighted_perplexity")
    pairs = [(-1.0, 0), (-2.0, 0), (-3.0, 1)]  # some replicates draw only zero-weight documents
    assert block_statistic(f, pairs) is not None
    with pytest.raises(ZeroDivisionError):
        bootstrap_replicates_reference(f, pairs, 50)
    with pytest.raises(ZeroDivisionError):
        bootstrap_replicates(f, pairs, 50)


def test_compensated_interpreter_keeps_indices_and_drops_block_sums(monkeypatch):
    # As on Python 3.12+: the sum-based statistics go through the aggregation per replicate.
    monkeypatch.setattr(rs, "SEQUENTIAL_FLOAT_SUM", False)
    for case in ("perplexity", "byte_perplexity", "bits_per_byte", "mean_of_floats"):
        name, _, xs = VECTORISED[case]
        assert block_statistic(AGGREGATIONS.get(name), xs) is None
    for case in ("median", "nanmean"):
        name, _, xs = VECTORISED[case]
        assert block_statistic(AGGREGATIONS.get(name), xs) is not None
    name, lm_agg, xs = VECTORISED["byte_perplexity"]
    assert_equals_lm_eval(name, lm_agg, xs, 1000)


@pytest.mark.parametrize(
    "f,xs",
    [
        (lambda r: max(r) - min(r), tuple(LLS[:70])),
        (lambda r: float(np.sum(r)), np.array(LLS[:70])),  # an array population: numpy scalars
        (lambda r: len(set(r)), ["a", "b", "c", "d"]),
    ],
)
def test_custom_statistics_equal_the_reference(f, xs):
    assert bootstrap_replicates(f, xs, 1200) == bootstrap_replicates_reference(f, xs, 1200)


@pytest.mark.parametrize("iters,xs", [(0, LLS[:5]), (10, [])])
def test_degenerate_inputs_fail_like_lm_eval(iters, xs):
    f = AGGREGATIONS.get("perplexity")
    with pytest.raises(ZeroDivisionError):
        lm_metrics.bootstrap_stderr(lm_metrics.perplexity, xs, iters)
    with pytest.raises(ZeroDivisionError):
        bootstrap_stderr(f, xs, iters)
