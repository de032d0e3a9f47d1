"""The bootstrap stderr of LAMBADA's perplexity: lm-eval's draw-by-draw loop, NumPy, the C++ kernel.

    python bench/bench_bootstrap.py [--iters 100000] [--docs 5153] [--all-cores] [--no-pure]

Per-document loglikelihoods like LAMBADA's (5,153 documents, one target word each: mostly between
-0.1 and -10, a long tail below), 100,000 iterations as lm-eval's default `bootstrap_iters`. Prints
the time of `bootstrap_replicates_reference` (the pure-Python loop lm-eval runs, 515 million
`random()` calls), of `bootstrap_replicates` with NumPy alone (`native=False`) and with the C++
kernel (`jaxeval.metrics.bootstrap_kernel`, built before the clock starts), which path the kernel
run took, and whether the stderrs and all replicates are equal. Pinned to one core unless
`--all-cores`.
"""

from __future__ import annotations

import argparse
import os
import random
import time

from jaxeval.metrics import AGGREGATIONS, bootstrap_kernel
from jaxeval.metrics.stderr import (
    bootstrap_replicates,
    bootstrap_replicates_reference,
    sample_stddev,
)


def lambada_like_loglikelihoods(docs: int, seed: int = 0) -> list[float]:
    """Target-word loglikelihoods: -lognormal, median about -1.5, a few below -15."""
    rng = random.Random(seed)
    return [-rng.lognormvariate(0.4, 1.1) for _ in range(docs)]


def timed(fn, *args, **kw):
    start = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=5153)
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    parser.add_argument("--no-pure", action="store_true", help="skip lm-eval's loop (~30 s)")
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

    if bootstrap_kernel.kernel_available():
        path = f"C++ kernel ({bootstrap_kernel.kernel_path(bootstrap_kernel.cxx_compiler()).name})"
    else:
        path = f"NumPy (kernel unavailable: {bootstrap_kernel.kernel_error()})"
    numpy, t_numpy = timed(bootstrap_replicates, f, xs, args.iters, native=False)
    kernel, t_kernel = timed(bootstrap_replicates, f, xs, args.iters)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"aggregation      {args.aggregation}, {args.docs} documents, {args.iters} iterations")
    print(f"cores            {cores}")
    print(f"default path     {path}")
    if not args.no_pure:
        pure, t_pure = timed(bootstrap_replicates_reference, f, xs, args.iters)
        print(f"pure (lm-eval)   {t_pure:8.3f} s")
    print(f"NumPy blocks     {t_numpy:8.3f} s")
    print(f"kernel           {t_kernel:8.3f} s")
    if not args.no_pure:
        print(f"pure / NumPy     {t_pure / t_numpy:8.1f}x")
        print(f"pure / kernel    {t_pure / t_kernel:8.1f}x")
    print(f"NumPy / kernel   {t_numpy / t_kernel:8.1f}x")
    stderrs = {"NumPy": sample_stddev(numpy), "kernel": sample_stddev(kernel)}
    if not args.no_pure:
        stderrs["pure"] = sample_stddev(pure)
    print("stderr           " + ", ".join(f"{k} {v!r}" for k, v in stderrs.items()))
    same = numpy == kernel and (args.no_pure or pure == kernel)
    print(f"equal            stderr {len(set(stderrs.values())) == 1}, replicates {same}")


if __name__ == "__main__":
    main()
