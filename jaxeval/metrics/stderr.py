"""Standard errors of aggregated metrics: closed forms and lm-eval's seeded, chunked bootstrap.

The bootstrap reproduces lm-eval 0.4.13 bit for bit (its multiprocessing and single-process paths
give the same numbers, and so does this one, which needs no process pool):

    chunk = min(1000, iters)
    for i in range(iters // chunk):            # iters=2500 -> 2 chunks, 2000 replicates
        rnd = random.Random(i)                 # fixed seeds 0, 1, ...: independent of --seed
        chunk times: replicate f(rnd.choices(xs, k=len(xs)))
    stderr = sample_stddev(replicates)

The result depends on the order of `xs` (document order), exactly as in lm-eval.

For mean, perplexity, weighted perplexity and bits per byte, every replicate's sums come from the
C++ kernel (`jaxeval.metrics.bootstrap_kernel`: the same Mersenne Twister stream, each replicate
summed in Python's order), finished with the aggregation's own float operations
(`jaxeval.metrics.replicate_stats.summed_statistic`). Otherwise, or without a C++ compiler, the
replicates are computed a block at a time: the draws come from the kernel or NumPy's copy of the
stream (`jaxeval.metrics.resample`), and those aggregations, median and nanmean are evaluated for
a whole block with the same floating-point operations (`jaxeval.metrics.replicate_stats`); any
other aggregation is called on each replicate's documents. `bootstrap_replicates_reference` is the
one-draw-at-a-time loop above, kept as the reference.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from jaxeval.metrics.aggregations import acc_all_question_scores, mean
from jaxeval.metrics.builtin import AGGREGATIONS
from jaxeval.metrics.replicate_stats import (
    block_statistic,
    replicate_lists_statistic,
    summed_statistic,
)
from jaxeval.metrics.resample import BOOTSTRAP_CHUNK, replicate_index_blocks, replicate_row_sums

StderrFn = Callable[[Sequence[Any]], float]

# Aggregations whose stderr is bootstrapped (lm-eval's `bootstrappable` list).
BOOTSTRAPPED: frozenset[str] = frozenset(
    {"median", "matthews_corrcoef", "f1", "perplexity", "bleu", "chrf", "chrf++", "ter", "nanmean"}
)
# Metrics (by metric name, as lm-eval keys it) whose bootstrap is capped at `BOOTSTRAP_CAP` iters.
CAPPED_METRICS: frozenset[str] = frozenset({"bleu", "chrf", "chrf++", "ter"})
BOOTSTRAP_CAP = 100


def sample_stddev(xs: Sequence[float]) -> float:
    """The standard deviation with Bessel's correction (ddof=1), summed left to right."""
    mu = mean(xs)
    return math.sqrt(sum([(x - mu) ** 2 for x in xs]) / (len(xs) - 1))


def mean_stderr(xs: Sequence[float]) -> float:
    """`sample_stddev(xs) / sqrt(n)`: the stderr of the mean aggregation."""
    return sample_stddev(xs) / math.sqrt(len(xs))


def acc_all_stderr(pairs: Sequence[tuple[Any, dict]]) -> float:
    """`mean_stderr` of per-question all-correct scores, questions keyed by question id alone.

    (The `acc_all` aggregation keys by (paragraph, question); lm-eval's stderr does not. Kept.)
    """
    return mean_stderr(acc_all_question_scores(pairs))


def bootstrap_replicates(
    f: Callable[[list], float], xs: Sequence[Any], iters: int, *, native: bool = True
) -> list[float]:
    """`iters // min(1000, iters)` chunks of resampled statistics, chunk i seeded with `Random(i)`.

    Equal, float for float, to `bootstrap_replicates_reference(f, xs, iters)`, with the C++
    kernel or (`native=False`, or no compiler) NumPy alone.
    """
    if iters < 1 or len(xs) == 0:  # lm-eval's own behaviour on these (errors included)
        return bootstrap_replicates_reference(f, xs, iters)
    summed = summed_statistic(f, xs)
    if summed is not None:
        sums = replicate_row_sums(
            summed.columns, iters, compensated=summed.compensated, native=native
        )
        replicates = None if sums is None else summed.finish(sums)
        if replicates is not None:
            return replicates
    statistic = block_statistic(f, xs) or replicate_lists_statistic(f, xs)
    replicates = []
    for block in replicate_index_blocks(iters, len(xs), native=native):
        replicates.extend(statistic(block))
    return replicates


def bootstrap_replicates_reference(
    f: Callable[[list], float], xs: Sequence[Any], iters: int
) -> list[float]:
    """lm-eval's loop, one `rnd.choices` per replicate: the reference for `bootstrap_replicates`."""
    chunk = min(BOOTSTRAP_CHUNK, iters)
    replicates = []
    for i in range(iters // chunk):
        rnd = random.Random(i)
        for _ in range(chunk):
            replicates.append(f(rnd.choices(xs, k=len(xs))))
    return replicates


def bootstrap_stderr(f: Callable[[list], float], xs: Sequence[Any], iters: int) -> float:
    """The sample stddev of the bootstrap replicates of `f(xs)`."""
    return sample_stddev(bootstrap_replicates(f, xs, iters))


_CLOSED_FORM: dict[str, StderrFn] = {"mean": mean_stderr, "acc_all": acc_all_stderr}


def _aggregation_name(aggregation: str | Callable) -> str | None:
    if isinstance(aggregation, str):
        return aggregation
    # A callable counts only if it *is* a registered aggregation (lm-eval compares by identity), so
    # a task's own `!function` aggregation gets no stderr, as in lm-eval.
    for name in AGGREGATIONS:
        if AGGREGATIONS.get(name) is aggregation:
            return name
    return None


def stderr_for_aggregation(
    aggregation: str | Callable,
    bootstrap_iters: int,
    *,
    metric_name: str | None = None,
) -> StderrFn | None:
    """The stderr function for an aggregation, or None when the stderr is reported as "N/A".

    * `bootstrap_iters <= 0` -> None, even for `mean` (lm-eval's switch for "no stderrs").
    * `mean`, `acc_all` -> closed form.
    * median, matthews_corrcoef, f1, perplexity, bleu, chrf, chrf++, ter, nanmean -> bootstrap with
      `bootstrap_iters`, capped at 100 when the *metric* is bleu/chrf/chrf++/ter (lm-eval keys the cap
      on the metric name; `metric_name` defaults to the aggregation name).
    * anything else (weighted_perplexity, bits_per_byte, brier_score, bypass, custom) -> None.

    The caller also reports "N/A" when there is at most one item, as lm-eval does.
    """
    if bootstrap_iters <= 0:
        return None
    name = _aggregation_name(aggregation)
    if name in BOOTSTRAPPED:
        f = AGGREGATIONS.get(name)
        capped = (metric_name if metric_name is not None else name) in CAPPED_METRICS
        iters = min(bootstrap_iters, BOOTSTRAP_CAP) if capped else bootstrap_iters
        return lambda xs: bootstrap_stderr(f, xs, iters)
    return _CLOSED_FORM.get(name)
