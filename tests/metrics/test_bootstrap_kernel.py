"""The C++ bootstrap kernel: `random.Random(i).choices` draw for draw, replicate sums in Python's
order, lm-eval's replicates and stderrs bit for bit, and NumPy's numbers without a compiler.

lm-eval runs single-process here (DISABLE_MULTIPROC), as in test_bootstrap_vectorised.py.
"""

import logging
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest

from jaxeval.metrics import AGGREGATIONS, bootstrap_kernel
from jaxeval.metrics import replicate_stats as rs
from jaxeval.metrics.replicate_stats import (
    compensated_row_sums,
    sequential_row_sums,
    summed_statistic,
)
from jaxeval.metrics.resample import (
    replicate_index_blocks,
    replicate_row_sums,
    seed_key,
)
from jaxeval.metrics.stderr import (
    bootstrap_replicates,
    bootstrap_replicates_reference,
    bootstrap_stderr,
    stderr_for_aggregation,
)

lm_metrics = pytest.importorskip("lm_eval.api.metrics")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.skipif(bootstrap_kernel.cxx_compiler() is None, reason="no C++ compiler"),
]

_rng = random.Random(20261206)
LLS = [-_rng.lognormvariate(0.4, 1.1) for _ in range(900)]
PAIRS = [(-w * _rng.uniform(2.0, 4.5), w) for w in (_rng.randint(40, 3000) for _ in range(200))]
SCORES = [_rng.choice([0.0, 0.5, 1.0]) + _rng.random() * 1e-3 for _ in range(301)]
ACCS = [_rng.randint(0, 1) for _ in range(500)]
NANS = [math.nan if _rng.random() < 0.1 else _rng.random() for _ in range(400)]
BINARY = [(g, g if _rng.random() < 0.8 else 1 - g) for g in (_rng.randint(0, 1) for _ in range(60))]
MULTI = [(g, g if _rng.random() < 0.6 else _rng.randint(0, 2)) for g in ACCS[:60]]
_WORDS = "the a cat dog sat ran on under mat red blue old new saw took gave".split()
TRANSLATIONS = [
    (" ".join(ref), " ".join(w for w in ref if _rng.random() < 0.85))
    for ref in ([_rng.choice(_WORDS) for _ in range(_rng.randint(5, 12))] for _ in range(12))
]

# case -> (aggregation name, lm-eval's aggregation, data, iterations)
CASES = {
    "perplexity": ("perplexity", lm_metrics.perplexity, LLS, 1000),
    "mean": ("mean", lm_metrics.mean, ACCS, 1000),
    "weighted_perplexity": ("weighted_perplexity", lm_metrics.weighted_perplexity, PAIRS, 1000),
    "bits_per_byte": ("bits_per_byte", lm_metrics.bits_per_byte, PAIRS, 1000),
    "median": ("median", lm_metrics.median, SCORES, 1000),
    "nanmean": ("nanmean", lm_metrics.nanmean, NANS, 1000),
    "f1": ("f1", lm_metrics.f1_score, BINARY, 1000),
    "matthews_corrcoef": ("matthews_corrcoef", lm_metrics.matthews_corrcoef, MULTI, 1000),
    "bleu": ("bleu", lm_metrics.bleu, TRANSLATIONS, 100),  # lm-eval's cap for these metrics
    "chrf": ("chrf", lm_metrics.chrf, TRANSLATIONS, 100),
    "ter": ("ter", lm_metrics.ter, TRANSLATIONS, 100),
}
SUMMED = ("perplexity", "mean", "weighted_perplexity", "bits_per_byte")


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")


@pytest.fixture
def calls(monkeypatch):
    """How often the kernel drew indices and row sums."""
    counts = {"indices": 0, "row_sums": 0}
    for name in counts:
        original = getattr(bootstrap_kernel.Stream, name)

        def spy(self, *args, _original=original, _name=name, **kw):
            counts[_name] += 1
            return _original(self, *args, **kw)

        monkeypatch.setattr(bootstrap_kernel.Stream, name, spy)
    return counts


def kernel_indices(seed: int, n: int, rows: int) -> list[list[int]]:
    out = np.empty((rows, n), dtype=np.int64)
    bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), seed_key(seed)).indices(n, out)
    return out.tolist()


def test_kernel_builds_into_the_test_cache():
    assert bootstrap_kernel.kernel_available(), bootstrap_kernel.kernel_error()
    path = bootstrap_kernel.kernel_path(bootstrap_kernel.cxx_compiler())
    assert path.exists()
    assert path.is_relative_to(Path(os.environ["JAXEVAL_CACHE"]))
    # The sums are exact only without fused or reassociated floating-point operations.
    assert "-ffp-contract=off" in bootstrap_kernel.FLAGS
    assert not {"-ffast-math", "-Ofast", "-ffp-contract=fast"} & set(bootstrap_kernel.FLAGS)


def test_module_docstring_example():
    out = np.empty(6, dtype=np.int64)
    bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), [0]).indices(3, out)
    assert out.tolist() == [2, 2, 1, 0, 1, 1]


def test_seed_key_is_cpythons():
    assert seed_key(0) == [0]
    assert seed_key(2**32 + 5) == [5, 1]
    assert seed_key(-7) == [7]


@pytest.mark.parametrize("seed", [0, 1, 7, 99, 2**31, 2**32 - 1, 2**32, 2**40 + 5, 2**70 + 3])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000, 5153])
def test_draws_equal_random_choices(seed, n):
    rnd = random.Random(seed)
    rows = max(3, 1300 // n)  # at least 1,300 draws: several twists of 312 draws each
    expected = [rnd.choices(range(n), k=n) for _ in range(rows)]
    assert kernel_indices(seed, n, rows) == expected


@pytest.mark.parametrize("n", [2**31 - 1, 2**30 + 7, 10**9 + 9, 2**26 + 1])
def test_draws_below_large_n(n):
    # Products near the top of the int32 range, where a vector path's conversion and truncation
    # must still give the scalar floor (the kernel keeps indices below 2**31).
    stream = bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), seed_key(5))
    out = np.empty(2001, dtype=np.int64)
    stream.indices(n, out)
    assert out.tolist() == random.Random(5).choices(range(n), k=2001)


def test_draws_continue_across_calls():
    # Reads that stop mid-twist and at odd counts (the 8-wide loop's scalar tail) continue the
    # stream where they stopped.
    stream = bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), seed_key(3))
    parts = []
    for count in (1, 7, 9, 300, 5, 1000):
        out = np.empty(count, dtype=np.int64)
        stream.indices(11, out)
        parts.extend(out.tolist())
    rnd = random.Random(3)
    assert parts == rnd.choices(range(11), k=len(parts))


def _hard_values(n: int, rng: random.Random) -> list[float]:
    """Magnitudes from 1e-8 to 1e16, both signs: any other order or compensation sums otherwise."""
    return [rng.choice((-1, 1)) * rng.random() * 10 ** rng.randint(-8, 16) for _ in range(n)]


@pytest.mark.parametrize("compensated", [False, True])
@pytest.mark.parametrize("n,rows", [(1, 3), (2, 8), (3, 17), (9, 1), (130, 25), (1000, 9)])
def test_row_sums_equal_the_numpy_row_sums(compensated, n, rows):
    # The NumPy row sums equal Python's `sum` (test_bootstrap_vectorised.py): one interpreter's
    # order each. Here 8 replicates side by side, then a tail of single ones.
    rng = random.Random(n * rows)
    values = np.array(_hard_values(n, rng))
    weights = np.array([float(rng.randint(0, 9)) for _ in range(n)])
    sums = [np.empty(rows), np.empty(rows)]
    stream = bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), seed_key(n))
    stream.row_sums(n, rows, [values, weights], sums, compensated=compensated)
    block = np.array(random.Random(n).choices(range(n), k=n * rows)).reshape(rows, n)
    numpy_sums = compensated_row_sums if compensated else sequential_row_sums
    assert str(sums[0].tolist()) == str(numpy_sums(values, block).tolist())
    assert str(sums[1].tolist()) == str(numpy_sums(weights, block).tolist())


@pytest.mark.parametrize("compensated", [False, True])
def test_row_sums_of_special_values(compensated):
    values = np.array([-0.0, 1.5, math.inf, -math.inf, math.nan, 2.0**-1074, 1e308, -1e16, 1.0])
    rows, n = 40, len(values)
    sums = [np.empty(rows)]
    stream = bootstrap_kernel.Stream(bootstrap_kernel.load_kernel(), seed_key(5))
    stream.row_sums(n, rows, [values], sums, compensated=compensated)
    block = np.array(random.Random(5).choices(range(n), k=n * rows)).reshape(rows, n)
    numpy_sums = compensated_row_sums if compensated else sequential_row_sums
    assert str(sums[0].tolist()) == str(numpy_sums(values, block).tolist())


@pytest.mark.parametrize("case", sorted(CASES))
def test_replicates_equal_the_reference(case, calls):
    name, _, xs, _ = CASES[case]
    f = AGGREGATIONS.get(name)
    iters = 2500 if case in SUMMED or case in ("median", "nanmean") else 30
    assert str(bootstrap_replicates(f, xs, iters)) == str(
        bootstrap_replicates_reference(f, xs, iters)
    )
    # Sum-based aggregations never leave the kernel; the others take its index blocks.
    chunks = iters // min(1000, iters)
    if case in SUMMED:
        assert calls == {"indices": 0, "row_sums": chunks}
    else:
        assert calls["row_sums"] == 0 and calls["indices"] >= chunks


@pytest.mark.parametrize("case", sorted(CASES))
def test_stderr_equals_lm_eval(case):
    name, lm_agg, xs, iters = CASES[case]
    f = AGGREGATIONS.get(name)
    expected = lm_metrics.bootstrap_stderr(lm_agg, xs, iters)
    got = bootstrap_stderr(f, xs, iters)
    assert got == expected or (math.isnan(got) and math.isnan(expected))
    if name in ("bleu", "chrf", "ter"):  # the results table's path caps these at 100
        assert stderr_for_aggregation(name, 100_000)(xs) == expected


def test_compensated_interpreter_sums_in_the_kernel(monkeypatch, calls):
    # Python 3.12's `sum`, whichever interpreter runs the test: kernel and NumPy agree.
    monkeypatch.setattr(rs, "FLOAT_SUM", "neumaier")
    for name, xs in (("perplexity", LLS), ("bits_per_byte", PAIRS)):
        f = AGGREGATIONS.get(name)
        assert summed_statistic(f, xs).compensated
        got = bootstrap_replicates(f, xs, 2000)
        assert str(got) == str(bootstrap_replicates(f, xs, 2000, native=False))
    assert calls["row_sums"] == 4


def test_zero_total_weight_raises_like_the_aggregation():
    f = AGGREGATIONS.get("weighted_perplexity")
    pairs = [(-1.0, 0), (-2.0, 0), (-3.0, 1)]  # some replicates draw only zero-weight documents
    weights = replicate_row_sums([np.array([0.0, 0.0, 1.0])], 50, compensated=False)[0]
    assert (weights == 0).any()
    with pytest.raises(ZeroDivisionError):
        bootstrap_replicates(f, pairs, 50)


def test_without_a_compiler_numpy_gives_the_same_numbers(monkeypatch, caplog, calls):
    f, median, xs = AGGREGATIONS.get("perplexity"), AGGREGATIONS.get("median"), LLS[:300]
    with_kernel = bootstrap_replicates(f, xs, 2500), bootstrap_replicates(median, SCORES, 1200)
    assert calls["row_sums"] == 2 and calls["indices"] > 0
    monkeypatch.setattr(bootstrap_kernel, "cxx_compiler", lambda: None)
    monkeypatch.setattr(bootstrap_kernel, "_state", {})  # a process that has not looked yet
    with caplog.at_level(logging.DEBUG, logger=bootstrap_kernel.__name__):
        assert not bootstrap_kernel.kernel_available()
        assert bootstrap_kernel.load_kernel() is None
    assert "no C++ compiler" in bootstrap_kernel.kernel_error()
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]  # logged once
    assert replicate_row_sums([np.array(xs)], 2500, compensated=False) is None
    calls.update(indices=0, row_sums=0)
    numpy = bootstrap_replicates(f, xs, 2500), bootstrap_replicates(median, SCORES, 1200)
    assert calls == {"indices": 0, "row_sums": 0}
    assert numpy == with_kernel
    assert numpy[0] == bootstrap_replicates_reference(f, xs, 2500)
    assert numpy[1] == bootstrap_replicates_reference(median, SCORES, 1200)


def test_a_failed_build_falls_back(monkeypatch, tmp_path):
    bad = tmp_path / "bootstrap_kernel.cc"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(bootstrap_kernel, "SOURCE", bad)
    monkeypatch.setattr(bootstrap_kernel, "_state", {})
    assert bootstrap_kernel.load_kernel() is None
    assert "failed" in bootstrap_kernel.kernel_error()
    rnd = random.Random(0)
    expected = [rnd.choices(range(4), k=4) for _ in range(5)]
    assert [row for b in replicate_index_blocks(5, 4) for row in b.tolist()] == expected
