"""The bootstrap stderr of LAMBADA's perplexity: lm-eval's draw-by-draw loop against the block path.

    python bench/bench_bootstrap.py [--iters 100000] [--docs 5153] [--all-cores]

Per-document loglikelihoods like LAMBADA's (5,153 documents, one target word each: mostly between
-0.1 and -10, a long tail below), 100,000 iterations as lm-eval's default `bootstrap_iters`. Prints
the time of `bootstrap_replicates_reference` (the pure-Python loop lm-eval runs, 515 million
`random()` calls), of `bootstrap_replicates` (NumPy blocks), their ratio, and whether the two stderrs
and all replicates are equal. Pinned to one core unless `--all-cores`.
"""

from __future__ import annotations

import argparse
import os
import random
import time

from jaxeval.metrics import AGGREGATIONS
from jaxeval.metrics.stderr import (
    bootstrap_replicates,
    bootstrap_replicates_reference,
    sample_stddev,
)


def lambada_like_loglikelihoods(docs: int, seed: int = 0) -> list[float]:
    """Target-word loglikelihoods: -lognormal, median about -1.5, a few below -15."""
    rng = random.Random(seed)
    return [-rng.lognormvariate(0.4, 1.1) for _ in range(docs)]


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=5153)
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    parser.add_argument(
        "--aggregation",
        default="perplexity",
        help="a registered aggregation name (weighted ones get (ll, bytes) pairs)",
    )
    args = parser.parse_args()
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    xs: list = lambada_like_loglikelihoods(args.docs)
    if args.aggregation in ("weighted_perplexity", "bits_per_byte"):
        rng = random.Random(1)
        xs = [(ll, rng.randint(2, 12)) for ll in xs]
    f = AGGREGATIONS.get(args.aggregation)

    new, t_new = timed(bootstrap_replicates, f, xs, args.iters)
    old, t_old = timed(bootstrap_replicates_reference, f, xs, args.iters)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    se_old, se_new = sample_stddev(old), sample_stddev(new)
    print(f"aggregation      {args.aggregation}, {args.docs} documents, {args.iters} iterations")
    print(f"cores            {cores}")
    print(f"old (pure)       {t_old:8.3f} s")
    print(f"new (blocks)     {t_new:8.3f} s")
    print(f"ratio            {t_old / t_new:8.1f}x")
    print(f"stderr old/new   {se_old!r} / {se_new!r}")
    print(f"equal            stderr {se_old == se_new}, replicates {old == new}")


if __name__ == "__main__":
    main()
