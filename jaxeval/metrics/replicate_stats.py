"""Bootstrap statistics for a whole block of replicates at once, equal to the aggregation's own.

A block holds one replicate per row, as document indices (`jaxeval.metrics.resample`). For the
aggregations below, the statistic of every row comes out of a few NumPy calls, with the same
floating-point operations in the same order as calling the aggregation on the row's documents:

    aggregation                      per replicate (s = sum(values), w = sum(weights), n docs)
    mean                             s / n
    perplexity                       exp(-(s / n))
    weighted_perplexity              exp(-(s / w))        over (loglikelihood, words or bytes)
    bits_per_byte                    -(s / w) / ln 2      over (loglikelihood, bytes)
    median                           sorted(docs)[n // 2]
    nanmean                          np.nanmean(docs), NaN when every document is NaN

**Sums.** The row sums add the drawn values as the running interpreter's `sum` adds floats, with
`exp`, the divisions and `ln 2` applied to Python floats afterwards, so the replicates are the very
floats lm-eval computes. Python 3.11 and earlier add left to right from 0 (`sequential_row_sums`);
Python 3.12 compensates (Neumaier: a running sum `s` and a running correction `c`, with
`c += (s - t) + x` or `(x - t) + s` for `t = s + x`, whichever of `s`, `x` is larger in magnitude,
and `s + c` at the end where `c` is finite and non-zero), which `compensated_row_sums` evaluates
for every replicate at once: the running sums are one `np.add.accumulate`, the corrections
follow elementwise from them, and their sum is one more sequential reduction. `FLOAT_SUM` names
the interpreter's algorithm, found by summing probe values at import; on an interpreter that
matches neither, the sum-based statistics go through the aggregation per replicate (the indices
stay vectorised), which is exact on any interpreter. `median` and `nanmean` do not use Python's
`sum`.

**Sums without indices.** For the sum-based aggregations, `summed_statistic` gives the columns
to sum and the finishing step alone, so that the C++ kernel can sum every replicate as it draws
it, in the same order, and hand back only the sums (`resample.replicate_row_sums`).

**When the block path applies.** Only where exactness is certain; otherwise `block_statistic`
returns None and the caller applies the aggregation to each replicate's documents:

* sums: every value (and weight) is a Python float, int or bool, ints small enough that every
  partial sum is exact in float64 (Python adds ints exactly, then converts); under the
  compensated sum, floats alone or ints alone (Python 3.12 adds an int among floats uncompensated);
* median: one element type (float, int or bool), no NaN, not both 0.0 and -0.0 (equal floats are
  then identical, so the middle element's value does not depend on how ties sort);
* nanmean: every value a float (Python or NumPy float64), as `np.nanmean` then sees float64.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxeval.metrics import aggregations as agg

BlockStatistic = Callable[[np.ndarray], list]
_EXACT_INT = 2**53  # float64 holds every integer below this exactly
_LN2 = math.log(2)


class Scratch:
    """Flat buffers reused from block to block, each viewed in the current block's shape, so that
    equal-sized blocks touch the same memory instead of fresh pages every time."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialised float64 array of `shape`, sharing memory with earlier calls by `name`."""
        size = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(size, dtype=np.float64)
        return buffer[:size].reshape(shape)


def sequential_row_sums(
    values: np.ndarray, block: np.ndarray, *, scratch: Scratch | None = None
) -> np.ndarray:
    """`sum(values[row])` for each row of `block`, as Python 3.11 adds floats: left to right from 0.

    The drawn values are transposed so that each replicate runs in a lane of its own and added in
    order (`lane_sums`): `((x0 + x1) + x2) + ...`. Python starts from 0.0, which differs only for
    a replicate of -0.0s alone (-0.0 here, 0.0 there); adding 0.0 turns -0.0 into 0.0 and changes
    nothing else.
    """
    scratch = scratch or Scratch()
    rows, n = block.shape
    drawn = scratch.array("drawn", (rows, n))
    values.take(block, out=drawn, mode="wrap")  # indices are in range; "wrap" is the fast path
    by_document = scratch.array("by_document", (n, rows))  # row j: every replicate's j-th draw
    np.copyto(by_document, drawn.T)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN, silently, as Python's sum
        return lane_sums(by_document) + 0.0


def lane_sums(a: np.ndarray) -> np.ndarray:
    """`a[0] + a[1] + ... + a[-1]`, added in that order, for each column of a C-contiguous 2-D
    array (0.0 for no rows).

    A reduction over the outer axis adds the rows in order, every column in a lane of its own; but
    a single column is one contiguous run, which `np.add.reduce` sums pairwise: a running
    `np.add.accumulate` adds it in order.
    """
    if a.shape[0] == 0:
        return np.zeros(a.shape[1])
    if a.shape[1] == 1:
        return np.add.accumulate(a[:, 0])[-1:]
    return np.add.reduce(a, axis=0)


def compensated_row_sums(
    values: np.ndarray, block: np.ndarray, *, scratch: Scratch | None = None
) -> np.ndarray:
    """`sum(values[row])` for each row of `block`, as Python 3.12 adds floats (Neumaier).

    CPython starts from the int 0 (`0 + x0`: -0.0 becomes 0.0), then for each further x:
    `t = s + x; c += (s - t) + x if |s| >= |x| else (x - t) + s; s = t`, and returns `s + c`
    when `c` is non-zero and finite, else `s`. The running sums `s` are a sequential
    `np.add.accumulate` over the documents (each replicate in a lane of its own, as in
    `sequential_row_sums`), every correction term follows elementwise from `s` and `x`, and `c` is
    their sequential sum: the same floating-point operations in the same order.
    """
    scratch = scratch or Scratch()
    rows, n = block.shape
    drawn = scratch.array("drawn", (rows, n))
    values.take(block, out=drawn, mode="wrap")
    x = scratch.array("by_document", (n, rows))  # row j: every replicate's j-th draw
    np.copyto(x, drawn.T)
    running = scratch.array("running", (n, rows))  # row j: the sums after j + 1 draws
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN, silently, as Python's sum
        x[0] += 0.0
        np.add.accumulate(x, axis=0, out=running)
        s, item, t = running[:-1], x[1:], running[1:]
        larger = np.abs(s) >= np.abs(item)
        terms = scratch.array("terms", (n - 1, rows))
        other = scratch.array("other", (n - 1, rows))
        np.add(np.subtract(s, t, out=terms), item, out=terms)  # (s - t) + x
        np.add(np.subtract(item, t, out=other), s, out=other)  # (x - t) + s
        np.copyto(terms, other, where=~larger)
        c = lane_sums(terms)
        total = running[-1].copy()
        np.add(total, c, out=total, where=(c != 0) & np.isfinite(c))
    return total


def _probe_float_sum() -> str | None:
    """Which of the row sums above equals this interpreter's `sum` of floats on probe values
    (magnitudes 1e-8 to 1e16, both signs: the orders and compensations give different sums), or
    None for neither."""
    rng = random.Random(0)
    probes = [[1e16, 1.0, -1e16], [-0.0, -0.0]]
    for n in (10, 100, 1000):
        probes.append(
            [rng.choice((-1, 1)) * rng.random() * 10 ** rng.randint(-8, 16) for _ in range(n)]
        )
    for kind, row_sums in (("sequential", sequential_row_sums), ("neumaier", compensated_row_sums)):
        if all(
            str(row_sums(np.array(p), np.arange(len(p))[None, :]).tolist()) == str([sum(p)])
            for p in probes
        ):
            return kind
    return None


# How this interpreter's `sum` adds floats: "sequential" (Python 3.11 and earlier), "neumaier"
# (3.12+), or None (neither: the sum-based statistics then run per replicate).
FLOAT_SUM: str | None = _probe_float_sum()
_ROW_SUMS = {"sequential": sequential_row_sums, "neumaier": compensated_row_sums}


def python_row_sums(values: np.ndarray, block: np.ndarray, *, scratch: Scratch) -> np.ndarray:
    """`sum(values[row])` for each row of `block`, as this interpreter's `sum` adds floats."""
    return _ROW_SUMS[FLOAT_SUM](values, block, scratch=scratch)


def replicate_lists_statistic(f: Callable[[list], Any], xs: Sequence[Any]) -> BlockStatistic:
    """`f` applied to each row's documents, as lists of the objects in `xs` (works for any `f`)."""
    pick = xs.__getitem__

    def statistic(block: np.ndarray) -> list:
        return [f(list(map(pick, row))) for row in block.tolist()]

    return statistic


def _summable(values: Sequence[Any]) -> np.ndarray | None:
    """`values` as float64 if the interpreter's `sum` (`FLOAT_SUM`) equals `python_row_sums` on
    every resample, else None."""
    if FLOAT_SUM is None:
        return None
    largest = 0
    kinds = set()
    for x in values:
        kind = type(x)
        if kind is float:
            kinds.add(float)
            continue
        if kind is not int and kind is not bool:
            return None
        kinds.add(int)
        largest = max(largest, abs(x))
    if largest * len(values) >= _EXACT_INT:
        return None
    if FLOAT_SUM == "neumaier" and len(kinds) > 1:
        return None
    return np.array(values, dtype=np.float64)


class SummedStatistic(NamedTuple):
    """A statistic of each replicate's column sums: `columns` are [n] float64 (the values, and the
    weights of a weighted aggregation), summed over each replicate's documents as this
    interpreter's `sum` adds them (`compensated`: Neumaier's sum); `finish(sums)` turns the
    replicates' sums ([R] float64 per column) into their statistics, or None when some replicate
    needs the aggregation itself (a zero total weight, which raises the aggregation's own error)."""

    columns: tuple[np.ndarray, ...]
    compensated: bool
    finish: Callable[[Sequence[np.ndarray]], list | None]


def _mean_based(finish: Callable[[float, int], float]) -> Callable:
    def build(f: Callable, xs: Sequence[Any]) -> SummedStatistic | None:
        values = _summable(xs)
        if values is None:
            return None
        n = len(xs)
        return SummedStatistic(
            (values,),
            FLOAT_SUM == "neumaier",
            lambda sums: [finish(s, n) for s in sums[0].tolist()],
        )

    return build


def _weighted(finish: Callable[[float, float], float]) -> Callable:
    def build(f: Callable, pairs: Sequence[Any]) -> SummedStatistic | None:
        if not all(type(p) in (tuple, list) and len(p) == 2 for p in pairs):
            return None
        values = _summable([p[0] for p in pairs])
        weights = _summable([p[1] for p in pairs])
        if values is None or weights is None:
            return None

        def finish_all(sums: Sequence[np.ndarray]) -> list | None:
            s, w = sums
            if not w.all():
                return None
            return [finish(sv, sw) for sv, sw in zip(s.tolist(), w.tolist())]

        return SummedStatistic((values, weights), FLOAT_SUM == "neumaier", finish_all)

    return build


_SUMMED: dict[Callable, Callable] = {
    agg.mean: _mean_based(lambda s, n: s / n),
    agg.perplexity: _mean_based(lambda s, n: math.exp(-(s / n))),
    agg.weighted_perplexity: _weighted(lambda s, w: math.exp(-(s / w))),
    agg.bits_per_byte: _weighted(lambda s, w: -(s / w) / _LN2),
}


def summed_statistic(f: Callable, xs: Sequence[Any]) -> SummedStatistic | None:
    """The row-sum form of aggregation `f` (matched by identity) over documents `xs`, or None when
    `f` is not a function of sums or `xs` holds values whose sums could differ from the
    interpreter's (see the module doc)."""
    build = _SUMMED.get(f)
    return None if build is None else build(f, xs)


def _from_sums(f: Callable, xs: Sequence[Any]) -> BlockStatistic | None:
    summed = summed_statistic(f, xs)
    if summed is None:
        return None
    one_by_one = replicate_lists_statistic(f, xs)
    scratch = Scratch()

    def statistic(block: np.ndarray) -> list:
        sums = [python_row_sums(c, block, scratch=scratch) for c in summed.columns]
        out = summed.finish(sums)
        return one_by_one(block) if out is None else out

    return statistic


def _median(f: Callable, xs: Sequence[Any]) -> BlockStatistic | None:
    kinds = {type(x) for x in xs}
    if len(kinds) != 1 or not kinds <= {float, int, bool}:
        return None
    if float in kinds:
        if any(x != x for x in xs):
            return None
        if len({math.copysign(1.0, x) for x in xs if x == 0}) > 1:
            return None
    order = sorted(range(len(xs)), key=xs.__getitem__)  # stable, as `sorted(replicate)` is
    # The narrowest integer type that holds every rank: np.partition runs 2x faster on int16.
    rank = np.empty(len(xs), dtype=np.min_scalar_type(-len(xs)))
    rank[order] = np.arange(len(xs))
    middle = len(xs) // 2

    def statistic(block: np.ndarray) -> list:
        # The middle rank of a row is a document whose value is the row's middle value.
        ranks = rank.take(block, mode="wrap")
        kth = np.partition(ranks, middle, axis=1)[:, middle]
        return [xs[order[k]] for k in kth.tolist()]

    return statistic


def _nanmean(f: Callable, xs: Sequence[Any]) -> BlockStatistic | None:
    if not all(type(x) is float or type(x) is np.float64 for x in xs):
        return None
    values = np.array(xs, dtype=np.float64)
    scratch = Scratch()

    def statistic(block: np.ndarray) -> list:
        # np.nanmean of a float row: NaNs set to 0, np.sum of the row (pairwise along the
        # contiguous axis, as for a 1-D array), divided by the count of the others.
        drawn = scratch.array("drawn", block.shape)
        values.take(block, out=drawn, mode="wrap")
        missing = np.isnan(drawn)
        counts = np.sum(~missing, axis=1, dtype=np.intp)
        np.copyto(drawn, 0.0, where=missing)
        totals = np.add.reduce(drawn, axis=1)
        with np.errstate(invalid="ignore"):  # all-NaN rows: 0 / 0, replaced below
            means = list(totals / counts)  # float64 scalars, as np.nanmean returns
        for r in np.flatnonzero(counts == 0).tolist():
            means[r] = np.nan
        return means

    return statistic


_BUILDERS: dict[Callable, Callable] = {
    **dict.fromkeys(_SUMMED, _from_sums),
    agg.median: _median,
    agg.nanmean: _nanmean,
}


def block_statistic(f: Callable, xs: Sequence[Any]) -> BlockStatistic | None:
    """The vectorised statistic for aggregation `f` (matched by identity) over documents `xs`, or
    None when `f` has none or `xs` holds values it cannot reproduce exactly (see the module doc)."""
    build = _BUILDERS.get(f)
    return None if build is None else build(f, xs)
