"""The block bootstrap equals lm-eval 0.4.13's, replicate for replicate, with `==` on floats.

lm-eval runs single-process here (DISABLE_MULTIPROC): its pool gives the same numbers but forks,
which is unsafe once JAX threads run in the test session.
"""

import functools
import math
import operator
import random
import sys

import numpy as np
import pytest

from jaxeval.metrics import AGGREGATIONS, bootstrap_stderr
from jaxeval.metrics import replicate_stats as rs
from jaxeval.metrics.replicate_stats import (
    FLOAT_SUM,
    Scratch,
    block_statistic,
    compensated_row_sums,
    python_row_sums,
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
    for native in (True, False):  # the C++ kernel where it builds; NumPy's blocks
        got = bootstrap_replicates(f, xs, iters, native=native)
        assert got == expected or (  # NaN != NaN: compare those by position
            len(got) == len(expected)
            and all(a == b or (a != a and b != b) for a, b in zip(got, expected))
        )
        if same_types:  # float or numpy float64, as lm-eval's statistic returns it
            assert [type(x) for x in got] == [type(x) for x in expected]
    stderr = bootstrap_stderr(f, xs, iters)
    assert stderr == lm_metrics.bootstrap_stderr(lm_agg, xs, iters)


def test_interpreter_sum_is_detected():
    # Python 3.12 made `sum` of floats compensated (Neumaier); 3.11 adds left to right.
    assert FLOAT_SUM == ("sequential" if sys.version_info < (3, 12) else "neumaier")
    assert (FLOAT_SUM == "sequential") == (sum([1e16, 1.0, -1e16]) == 0.0)


@pytest.mark.parametrize("case", sorted(VECTORISED))
def test_block_path_is_taken(case):
    name, _, xs = VECTORISED[case]
    assert block_statistic(AGGREGATIONS.get(name), xs) is not None


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
    # Every replicate goes through sklearn or sacrebleu on lm-eval's side: 2-20 s each.
    name, lm_agg, xs = PER_REPLICATE[case]
    assert_equals_lm_eval(name, lm_agg, xs, 1000)


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
        # The C++ kernel's sums (tests/metrics/test_bootstrap_kernel.py) and NumPy's agree.
        f = AGGREGATIONS.get(name)
        assert bootstrap_replicates(f, xs, 100_000) == bootstrap_replicates(
            f, xs, 100_000, native=False
        )
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


def cpython_312_sum(values: list[float]) -> float:
    """CPython 3.12's `sum` of Python floats, transcribed from `builtin_sum_impl` (bltinmodule.c)."""
    if not values:
        return 0
    s, c = 0 + values[0], 0.0
    for x in values[1:]:
        t = s + x
        if abs(s) >= abs(x):
            c += (s - t) + x
        else:
            c += (x - t) + s
        s = t
    return s + c if c and math.isfinite(c) else s


ROW_SUMS = {"sequential": sequential_row_sums, "neumaier": compensated_row_sums}
# Each algorithm's Python-level definition, whatever the running interpreter's `sum` is.
PYTHON_SUMS = {
    "sequential": lambda xs: functools.reduce(operator.add, xs, 0),
    "neumaier": cpython_312_sum,
}


def _blocks(values: list[float], rng: random.Random, n: int) -> list[np.ndarray]:
    # One row alone too: NumPy would sum a lone contiguous row pairwise.
    return [
        np.array([[rng.randrange(len(values)) for _ in range(n)] for _ in range(rows)])
        for rows in (1, 2, 3, 40)
    ]


@pytest.mark.parametrize("kind", sorted(ROW_SUMS))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 127, 128, 129, 1000, 4097])
def test_row_sums_equal_their_python_definition(kind, n):
    rng = random.Random(n)
    values = _hard_values(n, rng) + [1e16, 1.0, -1e16, -0.0]
    for block in _blocks(values, rng, n):
        got = ROW_SUMS[kind](np.array(values), block).tolist()
        expected = [PYTHON_SUMS[kind]([values[j] for j in row]) for row in block.tolist()]
        assert str(got) == str(expected)  # -0.0 vs 0.0 spelled out
        # Pairwise summation (NumPy's along a row) would not do: the data tells them apart.
        if n >= 9 and len(block) == 40:
            assert np.sum(np.array(values)[block], axis=1).tolist() != expected


def test_the_algorithms_differ():
    values = [1e16, 1.0, -1e16]
    assert PYTHON_SUMS["sequential"](values) == 0.0
    assert PYTHON_SUMS["neumaier"](values) == 1.0


@pytest.mark.parametrize("seed", range(20))
def test_row_sums_equal_this_interpreters_sum(seed):
    # The random search of the definition above, against `sum` itself on the running interpreter.
    rng = random.Random(seed)
    n = rng.randint(1, 400)
    values = [rng.choice((-1, 1)) * rng.random() * 10 ** rng.randint(-20, 20) for _ in range(n)]
    if seed % 4 == 0:
        values += [-0.0, 0.0, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324]
    for block in _blocks(values, rng, n):
        got = python_row_sums(np.array(values), block, scratch=Scratch()).tolist()
        expected = [sum(values[j] for j in row) for row in block.tolist()]
        assert str(got) == str(expected)


def test_row_sums_special_values():
    values = [-0.0, 1.5, math.inf, -math.inf, math.nan, 2.0**-1074, 1e308]
    block = np.array([[0, 0, 0], [0, 1, 0], [2, 1, 2], [2, 3, 1], [4, 1, 1], [5, 5, 0], [6, 6, 3]])
    for kind, row_sums in ROW_SUMS.items():
        got = row_sums(np.array(values), block).tolist()
        expected = [PYTHON_SUMS[kind]([values[j] for j in row]) for row in block.tolist()]
        assert str(got) == str(expected), kind  # -0.0 vs 0.0 and nan spelled out
        assert math.copysign(1, got[0]) == 1.0  # Python's sum of -0.0s is 0.0


def test_a_chunks_last_lone_replicate_equals_lm_eval():
    # 787 documents: blocks of 333 rows, so each chunk of 1,000 ends with a block of one row.
    rng = random.Random(787)
    xs = [-rng.lognormvariate(0.4, 1.1) for _ in range(787)]
    expected = lm_metrics._bootstrap_internal_no_mp(lm_metrics.perplexity, xs, 1000)
    assert bootstrap_replicates(AGGREGATIONS.get("perplexity"), xs, 1000, native=False) == expected


def test_compensated_sums_take_floats_or_ints_not_both(monkeypatch):
    # Python 3.12 adds an int among floats without compensation: such data goes per replicate.
    f = AGGREGATIONS.get("mean")
    monkeypatch.setattr(rs, "FLOAT_SUM", "neumaier")
    assert block_statistic(f, [0.5, 1, 0.25]) is None
    assert block_statistic(f, [0.5, 1.0, 0.25]) is not None
    assert block_statistic(f, [0, 1, True]) is not None
    monkeypatch.setattr(rs, "FLOAT_SUM", "sequential")
    assert block_statistic(f, [0.5, 1, 0.25]) is not None


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


def test_an_unknown_sum_keeps_indices_and_drops_block_sums(monkeypatch):
    # An interpreter whose `sum` is neither algorithm: the sum-based statistics go through the
    # aggregation per replicate.
    monkeypatch.setattr(rs, "FLOAT_SUM", None)
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
