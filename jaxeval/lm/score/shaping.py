"""Batch shapes fitted to the work: how long rows are packed, and how a bucket's rows become batches.

Used by the planner when the bucket set has `fit_rows` (the default grid, `fitted_buckets`).
Two decisions, both pure functions of the rows the planner built:

1. **Pack length** (`pack_length`). New rows open at the grid length >= 4x the median unit, at
   least 256 tokens, at most the largest bucket: short units (0-shot multiple choice, LAMBADA) pack
   into rows of 256, 25-shot contexts of ~1,200 tokens into rows of ~5,120 (four per row), rolling
   windows into max_length rows. Each row then shrinks to the smallest bucket holding its content.

2. **Batches** (`shape_batches`). A bucket with n rows runs n // B full batches of B rows; the rest
   is cut into power-of-two row counts (multiples of `row_multiple`, or of 1 where rows split
   their tokens over the devices: `BucketSet.multiple_at`), so no row is padding:

       B = 32, n = 75 -> 32 + 32 + 8 + 2 + 1                     (exact: 5 batches, 4 shapes)

   Every distinct shape is one compilation, so shapes are then traded back for padding while the
   plan's efficiency (real / computed tokens) stays >= `min_efficiency`: the remainder rounds up
   (75 -> 32 + 32 + 11 -> 32 + 32 + 16, or a full 32 when cheap enough), and a rarely used bucket
   moves into the next bigger bucket the plan already uses (its extra score points counted at
   `POINT_COST` row tokens each, since the LM head runs at every point of a bucket). Cheapest savings first; with a floor of
   0.95 the plans of the test matrix stay >= 0.9 (`tests/lm/test_shaping.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxeval.lm.score.buckets import Bucket, BucketSet

PACK_MIN_LENGTH = 256
PACK_UNITS_PER_ROW = 4
DEFAULT_MIN_EFFICIENCY = 0.95
# A score point costs the LM head (2 D V FLOPs), a row token the layer stack (~2 x body params):
# about a quarter for small models (SmolLM2-135M: 57 vs 212 MFLOP), less for big ones.
POINT_COST = 0.25


def point_cost_of(hidden: int, vocab: int, body_params: int) -> float:
    """A score point's cost in row tokens: the LM head's D x V multiply-adds over the layer stack's
    parameters (attention ignored). SmolLM2-135M: 576 x 49,152 / 106M = 0.27; Llama-3-8B: 0.075;
    a 2-layer, 64-wide model with the same vocabulary: about 40, where padding points cost far more
    than padding tokens."""
    return hidden * vocab / max(1, body_params)


def pack_length(unit_tokens: Sequence[int], buckets: BucketSet) -> int:
    """The row length new rows open at: the grid length >= 4x the median unit (256 .. max_length).

    pack_length([40, 60, 80], grid up to 8192)         -> 256
    pack_length([1100, 1200, 1300], grid up to 8192)   -> 5120
    pack_length([8192] * 9 + [3000], grid up to 8192)  -> 8192
    """
    if not len(unit_tokens):
        return buckets.lengths()[0]
    want = max(PACK_MIN_LENGTH, PACK_UNITS_PER_ROW * int(np.median(unit_tokens)))
    lengths = buckets.lengths()
    return next((t for t in lengths if t >= want), lengths[-1])


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchShape:
    """One batch to build: the (possibly row-reduced) bucket and the indices of its rows."""

    bucket: Bucket
    rows: tuple[int, ...]


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _pieces(rows: int, multiple: int) -> list[int]:
    """Power-of-two multiples of `multiple` summing to `rows` (a multiple of it), largest first.

    _pieces(11, 1) -> [8, 2, 1];  _pieces(12, 2) -> [8, 4]
    """
    units, out, bit = rows // multiple, [], 1
    while units:
        if units & 1:
            out.append(bit * multiple)
        units >>= 1
        bit <<= 1
    return sorted(out, reverse=True)


def _remainder_options(r: int, full_rows: int, multiple: int) -> list[tuple[int, list[int]]]:
    """Ways to run the last r rows of a bucket: (rows computed, row counts per batch), exact first.

    _remainder_options(11, 32, 1) -> [(11, [8, 2, 1]), (12, [8, 4]), (16, [16]), (32, [32])]
    """
    exact = _round_up(r, multiple)
    options, step = [], multiple
    while True:
        rounded = min(_round_up(exact, step), full_rows)
        pieces = [full_rows] if rounded == full_rows else _pieces(rounded, multiple)
        if not options or rounded != options[-1][0]:
            options.append((rounded, pieces))
        if rounded == full_rows:
            return options
        step *= 2


def shape_batches(
    rows_by_bucket: dict[Bucket, list[int]],
    row_tokens: Sequence[int],
    buckets: BucketSet,
    *,
    min_efficiency: float = DEFAULT_MIN_EFFICIENCY,
    point_cost: float = POINT_COST,
) -> list[BatchShape]:
    """Cuts each bucket's rows into batches (see the module docstring); biggest shapes first.
    `point_cost`: what a score point costs in row tokens (`point_cost_of` for a model).

    `rows_by_bucket` maps each bucket to the indices of its rows (rows hold `row_tokens[i]` real
    tokens); every row lands in exactly one returned batch.
    """
    groups = {b: list(r) for b, r in rows_by_bucket.items() if r}
    real = sum(row_tokens[i] for rows in groups.values() for i in rows)

    def computed(n: int, b: Bucket) -> int:
        return _round_up(n, buckets.multiple_at(b.length)) * b.length

    spare = real / min_efficiency - sum(computed(len(r), b) for b, r in groups.items())
    # Rare buckets move into the next bigger bucket already in use (one shape fewer).
    for small in sorted(groups, key=lambda b: (b.length, b.points)):
        bigger = [
            b
            for b in groups
            if b != small and b.length >= small.length and b.points >= small.points and groups[b]
        ]
        if not bigger or not groups[small]:
            continue
        big = min(bigger, key=lambda b: (b.length, b.points))
        n_small, n_big = len(groups[small]), len(groups[big])
        cost = computed(n_small + n_big, big) - computed(n_big, big) - computed(n_small, small)
        head = _round_up(n_small, buckets.multiple_at(small.length))
        cost += point_cost * head * (big.points - small.points)  # head work
        if cost <= spare:
            groups[big].extend(groups[small])
            groups[small] = []
            spare -= cost
    out: list[BatchShape] = []
    for bucket in sorted((b for b in groups if groups[b]), key=lambda b: (-b.length, -b.points)):
        rows = groups[bucket]
        full = len(rows) // bucket.rows * bucket.rows
        for s in range(0, full, bucket.rows):
            out.append(BatchShape(bucket=bucket, rows=tuple(rows[s : s + bucket.rows])))
        r = len(rows) - full
        if not r:
            continue
        options = _remainder_options(r, bucket.rows, buckets.multiple_at(bucket.length))
        base = options[0][0]
        known = {bucket.rows} if full else set()
        chosen = min(
            (o for o in options if (o[0] - base) * bucket.length <= max(spare, 0)),
            key=lambda o: (len(set(o[1]) - known), len(o[1]), o[0]),
        )
        spare -= (chosen[0] - base) * bucket.length
        start = full
        for n in chosen[1]:
            take = rows[start : start + n]
            start += len(take)
            shape = bucket if n == bucket.rows else dataclasses.replace(bucket, rows=n)
            out.append(BatchShape(bucket=shape, rows=tuple(take)))
    return out
