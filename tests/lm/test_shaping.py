"""Batches sized to the work (issue 10): padding efficiency >= 90% across workload sizes,
max_length 512..131072 and every --batch_size form, on the default fitted bucket grid (planner only)."""

from __future__ import annotations

import functools
import logging
import types

import numpy as np
import pytest

from jaxeval.lm.encoding import rolling_windows, truncate_request
from jaxeval.lm.model_config import parse_batch_size as _parse_batch_size
from jaxeval.lm.score.buckets import Bucket, fitted_buckets, grid_lengths
from jaxeval.lm.score.budget import auto_token_budget
from jaxeval.lm.score.planner import plan_score_batches
from jaxeval.lm.score.shaping import _pieces, _remainder_options, pack_length, shape_batches

MAX_LENGTHS = (512, 2048, 8192, 32768, 131072)
BATCH_SIZE_FORMS = (1, 8, 64, "auto", "auto:4")
# SmolLM2-135M's shapes: the CPU budget comes from width and host memory, not max_length.
SMOLLM2 = types.SimpleNamespace(hidden_size=576, intermediate_size=1536, num_heads=9)


@functools.cache
def _workload(kind: str, n_docs: int, max_length: int) -> list:
    """Token requests with the length profile of real tasks (lengths in tokens, seeded)."""
    rng = np.random.default_rng(n_docs)
    out = []
    for _ in range(n_docs):
        if kind in ("mc_0shot", "mc_25shot"):  # ARC-Easy: 4 choices sharing one context
            lo, hi = (25, 90) if kind == "mc_0shot" else (900, 1700)
            ctx = list(rng.integers(1, 1000, size=int(rng.integers(lo, hi))))
            out += [
                (ctx, list(rng.integers(1, 1000, size=int(rng.integers(1, 12))))) for _ in "abcd"
            ]
        elif kind == "lambada":
            ctx = list(rng.integers(1, 1000, size=int(rng.integers(40, 200))))
            out.append((ctx, list(rng.integers(1, 1000, size=int(rng.integers(1, 3))))))
        else:  # rolling: WikiText-like pages of 200..60k tokens, lm-eval's windows
            n = int(np.clip(rng.lognormal(np.log(3000), 0.8), 200, 60000))
            page = list(rng.integers(1, 1000, size=n))
            out += rolling_windows(page, prefix_token=0, max_length=max_length)
    logging.disable(logging.WARNING)  # truncation notices
    try:
        return [truncate_request(c, x, max_length) for c, x in out]
    finally:
        logging.disable(logging.NOTSET)


def _budgets(max_length: int) -> set[int]:
    forms = {_parse_batch_size(b) for b in BATCH_SIZE_FORMS}
    cpu = {auto_token_budget(SMOLLM2, None, max_length, 64) for _ in forms}
    return cpu | {1024, 65536}  # and an accelerator-sized budget


CASES = [
    (kind, n)
    for kind, sizes in {
        "mc_0shot": (10, 100, 1000, 2376),
        "mc_25shot": (10, 100, 1000),
        "lambada": (10, 100, 1000),
        "rolling": (10, 60),
    }.items()
    for n in sizes
]


@pytest.mark.parametrize("max_length", MAX_LENGTHS)
@pytest.mark.parametrize("kind,n_docs", CASES)
def test_padding_efficiency_at_least_90_percent(kind, n_docs, max_length):
    requests = _workload(kind, n_docs, max_length)
    for budget in sorted(_budgets(max_length)):
        buckets = fitted_buckets(max_length=max_length, token_budget=budget)
        plan = plan_score_batches(
            requests, buckets
        )  # checks every request is answered exactly once
        assert plan.efficiency >= 0.9, (kind, n_docs, max_length, budget, plan.efficiency)
        assert all(
            b.bucket.rows <= budget // b.bucket.length or b.bucket.rows == 1 for b in plan.batches
        )
        assert len(plan.shapes) <= 20


def test_batch_size_forms_share_one_cpu_budget_independent_of_max_length():
    budgets = {auto_token_budget(SMOLLM2, None, ml, 64) for ml in (2048, 8192, 131072)}
    assert budgets == {8192}


def test_docstring_examples():
    assert grid_lengths(1000) == [
        32,
        40,
        48,
        56,
        64,
        80,
        96,
        112,
        128,
        160,
        192,
        224,
        256,
        320,
        384,
        448,
        512,
        640,
        768,
        896,
        1000,
    ]
    grid = fitted_buckets(max_length=8192, token_budget=8192)
    assert grid.buckets[:4] == (
        Bucket(length=32, points=8, rows=256),
        Bucket(length=32, points=16, rows=256),
        Bucket(length=32, points=32, rows=256),
        Bucket(length=40, points=8, rows=204),
    )
    assert grid.buckets[-1] == Bucket(length=8192, points=8192, rows=1) and grid.fit_rows
    assert pack_length([40, 60, 80], grid) == 256
    assert pack_length([1100, 1200, 1300], grid) == 5120
    assert pack_length([8192] * 9 + [3000], grid) == 8192
    assert _pieces(11, 1) == [8, 2, 1] and _pieces(12, 2) == [8, 4]
    assert _remainder_options(11, 32, 1) == [(11, [8, 2, 1]), (12, [8, 4]), (16, [16]), (32, [32])]


def test_multiple_choice_rows_keep_the_small_point_bucket():
    """Shapes are merged to save compilations, but not into a bucket with twice the score points:
    the LM head runs at every point of a bucket."""
    buckets = fitted_buckets(max_length=8192, token_budget=8192)
    plan = plan_score_batches(_workload("mc_0shot", 100, 8192), buckets)
    points = sum(b.bucket.rows * b.bucket.points for b in plan.batches)
    assert points * 2 <= plan.computed_tokens and plan.efficiency >= 0.9


def test_last_batch_is_cut_to_its_rows_and_traded_for_shapes_above_the_floor():
    bucket = Bucket(length=64, points=8, rows=32)
    buckets = fitted_buckets(max_length=64, token_budget=2048)
    rows = {bucket: list(range(75))}
    exact = shape_batches(rows, [64] * 75, buckets, min_efficiency=1.0)
    assert [s.bucket.rows for s in exact] == [32, 32, 8, 2, 1]
    assert sorted(i for s in exact for i in s.rows) == list(range(75))
    loose = shape_batches(rows, [64] * 75, buckets, min_efficiency=0.75)
    assert [s.bucket.rows for s in loose] == [32, 32, 32]  # no new shape at all
    mid = shape_batches(rows, [64] * 75, buckets, min_efficiency=0.9)
    assert [s.bucket.rows for s in mid] == [32, 32, 16]
