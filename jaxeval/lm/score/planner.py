"""Host-side request planning: truncated requests -> packed rows -> fixed-shape `ScoreBatch`es.

Steps (all numpy, deterministic for a given request list and bucket set):

1. **Units.** With `shared_context`, requests whose (truncated) context tokens are equal form one
   unit: the context is laid out once and each continuation becomes a child segment. A unit too big
   for the largest bucket is split into several, each repeating the context. Without it, each
   request is its own unit.
2. **Rows.** Units sorted longest first are placed best-fit into open rows (`packing=True`) or one
   per row; a new row takes the smallest bucket length that fits its first unit.
3. **Batches.** Each row gets the smallest bucket (T, K) that fits what it holds; rows of a bucket
   are grouped B at a time. With a fitted grid (`BucketSet.fit_rows`, the default) rows open at a
   pack length chosen from the work and each bucket's last batch is cut to the rows it has
   (`jaxeval.lm.score.shaping`). With explicit buckets, rows from a smaller bucket's last, partial batch
   move into the padding rows of a bigger bucket's last batch where they fit; what remains is
   padded with explicit padding rows.

Layout of one unit inside a row, for context [5, 6, 7] with continuations [8, 9] (request 0) and
[4] (request 1), placed at row offset 0 with segment ids starting at 1:

    index      0  1  2  3
    tokens     5  6  7  8          (the last continuation token is never an input)
    positions  0  1  2  3          (restart at 0 per context; children continue after it)
    segment    1  1  1  2          (request 1's continuation has no input tokens: no segment cells)
    parent     0  0  0  1
    points     (pos 2 -> 8, slot 0) (pos 3 -> 9, slot 0) (pos 2 -> 4, slot 1)

The last context position (2) appears once per child among the score points.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxeval.kernels.score import ScoreBatch
from jaxeval.lm.encoding import TruncatedRequest
from jaxeval.lm.score import shaping
from jaxeval.lm.score.buckets import Bucket, BucketSet

# A context shorter than this is not worth sharing (it would only constrain packing).
MIN_SHARED_CONTEXT = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedScoreBatch:
    """One kernel call: its bucket, the batch arrays, and which request each slot answers."""

    bucket: Bucket
    batch: ScoreBatch  # numpy int32 arrays, shapes [B, T] and [B, K]
    slot_request: np.ndarray  # int64[S]: request index answered by each slot, -1 = unused
    real_tokens: int  # non-padding tokens in the batch

    @property
    def computed_tokens(self) -> int:
        return self.bucket.rows * self.bucket.length


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScorePlan:
    batches: tuple[PlannedScoreBatch, ...]
    n_requests: int

    @property
    def real_tokens(self) -> int:
        return sum(b.real_tokens for b in self.batches)

    @property
    def computed_tokens(self) -> int:
        return sum(b.computed_tokens for b in self.batches)

    @property
    def efficiency(self) -> float:
        """Real tokens / computed tokens (1.0 = no padding)."""
        return self.real_tokens / max(1, self.computed_tokens)

    @property
    def shapes(self) -> tuple[Bucket, ...]:
        """The distinct batch shapes in first-use order (one compilation each)."""
        return tuple(dict.fromkeys(b.bucket for b in self.batches))


@dataclasses.dataclass
class _Unit:
    context: tuple[int, ...]
    children: list[tuple[int, tuple[int, ...]]]  # (request index, continuation)
    tokens: int = 0
    points: int = 0

    def add(self, index: int, continuation: tuple[int, ...]) -> None:
        if not self.children:
            self.tokens = len(self.context)
        self.children.append((index, continuation))
        self.tokens += len(continuation) - 1
        self.points += len(continuation)


@dataclasses.dataclass
class _Row:
    length: int
    max_points: int
    units: list[_Unit] = dataclasses.field(default_factory=list)
    tokens: int = 0
    points: int = 0


def _make_units(
    requests: Sequence[TruncatedRequest], buckets: BucketSet, shared_context: bool
) -> list[_Unit]:
    max_len = buckets.max_length
    max_pts = buckets.max_points(max_len)
    if not shared_context:
        units = []
        for i, r in enumerate(requests):
            u = _Unit(r.context, [])
            u.add(i, r.continuation)
            units.append(u)
        return units
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(requests):
        key = r.context if len(r.context) >= MIN_SHARED_CONTEXT else (i, -1, *r.context)
        groups.setdefault(key, []).append(i)
    units = []
    for idx in groups.values():
        ctx = requests[idx[0]].context
        unit = _Unit(ctx, [])
        for i in idx:
            cont = requests[i].continuation
            if unit.children and (
                unit.tokens + len(cont) - 1 > max_len or unit.points + len(cont) > max_pts
            ):
                units.append(unit)
                unit = _Unit(ctx, [])
            unit.add(i, cont)
        units.append(unit)
    return units


def _pack_rows(
    units: list[_Unit],
    buckets: BucketSet,
    packing: bool,
    min_length: int = 0,
    point_cost: float = shaping.POINT_COST,
) -> list[_Row]:
    order = sorted(
        range(len(units)),
        key=lambda u: (-units[u].tokens, -units[u].points, units[u].children[0][0]),
    )
    rows: list[_Row] = []
    open_rows: list[
        tuple[int, int]
    ] = []  # (free tokens, row id), sorted: best fit = first with enough room
    for ui in order:
        unit = units[ui]
        target = None
        if packing:
            j = bisect.bisect_left(open_rows, (unit.tokens, -1))
            while j < len(open_rows):
                row = rows[open_rows[j][1]]
                if row.points + unit.points <= row.max_points:
                    target = j
                    break
                j += 1
        if target is None:
            length = buckets.row_length_for(max(unit.tokens, min_length), unit.points)
            row = _Row(length=length, max_points=_points_cap(unit, length, buckets, point_cost))
            rows.append(row)
            rid = len(rows) - 1
        else:
            free, rid = open_rows.pop(target)
            row = rows[rid]
        row.units.append(unit)
        row.tokens += unit.tokens
        row.points += unit.points
        if packing and row.length - row.tokens > 0:
            bisect.insort(open_rows, (row.length - row.tokens, rid))
    return rows


def _points_cap(unit: _Unit, length: int, buckets: BucketSet, point_cost: float) -> int:
    """The score points a new row opened by `unit` may hold. Where a point costs more than a row
    token (`point_cost` >= 1: a small model with a large vocabulary) on a fitted grid, the smallest
    K of its length that a row full of units like this one needs: the LM head runs at all K points
    of a row, so a row of multiple-choice answers that spills a few points past K=160 would double
    its head cost at K=320. Otherwise the largest K of that length (rows fill up with tokens).

        unit of 41 tokens, 20 points, rows of 320 (K 40, 160, 320)  -> 160   (full: 156 points)
        unit of 80 tokens, 2 points, rows of 320                     -> 40
    """
    top = buckets.max_points(length)
    if not buckets.fit_rows or point_cost < 1:
        return top
    want = max(unit.points, -(-unit.points * length // max(1, unit.tokens)))
    tiers = sorted(b.points for b in buckets if b.length == length and b.points >= want)
    return tiers[0] if tiers else top


def _fill_row(
    row: _Row, r: int, arrays: dict[str, np.ndarray], slot_request: np.ndarray, next_slot: int
) -> int:
    """Writes one row into batch row `r`; returns the next free slot."""
    tokens, positions, segment, parent = (
        arrays[k] for k in ("tokens", "positions", "segment", "parent")
    )
    spos, stgt, sslot = (arrays[k] for k in ("score_pos", "score_tgt", "score_slot"))
    offset, seg, k = 0, 1, 0
    for unit in row.units:
        c = len(unit.context)
        ctx_seg = seg
        tokens[r, offset : offset + c] = unit.context
        positions[r, offset : offset + c] = np.arange(c)
        segment[r, offset : offset + c] = ctx_seg
        last_ctx = offset + c - 1
        offset += c
        seg += 1
        for index, cont in unit.children:
            n = len(cont)
            if n > 1:
                tokens[r, offset : offset + n - 1] = cont[:-1]
                positions[r, offset : offset + n - 1] = np.arange(c, c + n - 1)
                segment[r, offset : offset + n - 1] = seg
                parent[r, offset : offset + n - 1] = ctx_seg
            spos[r, k] = last_ctx
            spos[r, k + 1 : k + n] = np.arange(offset, offset + n - 1)
            stgt[r, k : k + n] = cont
            sslot[r, k : k + n] = next_slot
            slot_request[next_slot] = index
            next_slot += 1
            offset += n - 1
            k += n
            seg += 1
    assert offset == row.tokens and k == row.points
    return next_slot


def _build_batch(bucket: Bucket, rows: Sequence[_Row]) -> PlannedScoreBatch:
    b, t, k = bucket.rows, bucket.length, bucket.points
    arrays = {
        name: np.zeros((b, t), np.int32) for name in ("tokens", "positions", "segment", "parent")
    }
    arrays.update(
        {name: np.full((b, k), -1, np.int32) for name in ("score_pos", "score_tgt", "score_slot")}
    )
    slot_request = np.full((bucket.slots,), -1, np.int64)
    next_slot = 0
    for r, row in enumerate(rows):
        next_slot = _fill_row(row, r, arrays, slot_request, next_slot)
    return PlannedScoreBatch(
        bucket=bucket,
        batch=ScoreBatch(**arrays),
        slot_request=slot_request,
        real_tokens=sum(row.tokens for row in rows),
    )


def _fill_partial_batches(by_bucket: dict[Bucket, list[_Row]]) -> None:
    """Moves rows of smaller buckets' last, partial batches into the padding rows of bigger ones.

    Padding rows are computed anyway, so a moved row costs nothing, and a small bucket whose last
    batch empties saves that whole batch. Largest buckets are filled first, from the largest donors.
    """
    order = sorted(by_bucket, key=lambda b: (-b.length, -b.points))
    for i, big in enumerate(order):
        free = -len(by_bucket[big]) % big.rows
        for small in order[i + 1 :]:
            if free == 0:
                break
            if small.length > big.length or small.points > big.points:
                continue
            donor = by_bucket[small]
            take = min(free, len(donor) % small.rows)
            if take:
                by_bucket[big].extend(donor[len(donor) - take :])
                del donor[len(donor) - take :]
                free -= take
    for bucket in [b for b, r in by_bucket.items() if not r]:
        del by_bucket[bucket]


def plan_score_batches(
    requests: Sequence[TruncatedRequest],
    buckets: BucketSet,
    *,
    packing: bool = True,
    shared_context: bool = True,
    min_efficiency: float = shaping.DEFAULT_MIN_EFFICIENCY,
    point_cost: float = shaping.POINT_COST,
) -> ScorePlan:
    """Plans every request into fixed-shape batches; asserts each request is answered exactly once.

    `min_efficiency` is the padding-efficiency floor a fitted grid trades shapes against
    (`jaxeval.lm.score.shaping.shape_batches`); explicit bucket lists ignore it. `point_cost` is a
    score point's cost in row tokens (`shaping.point_cost_of`).
    """
    for i, r in enumerate(requests):
        if r.input_len > buckets.max_length or len(r.continuation) > buckets.max_points(
            buckets.max_length
        ):
            raise ValueError(
                f"request {i} needs {r.input_len} tokens / {len(r.continuation)} points, more than the "
                f"largest bucket {buckets.buckets[-1]}; truncate it to max_length first"
            )
    units = _make_units(requests, buckets, shared_context)
    if buckets.fit_rows:
        start = shaping.pack_length([u.tokens for u in units], buckets) if packing else 0
        rows = _pack_rows(units, buckets, packing, start, point_cost)
        by_index: dict[Bucket, list[int]] = {}
        for i, row in enumerate(rows):
            by_index.setdefault(buckets.pick(row.tokens, row.points), []).append(i)
        shapes = shaping.shape_batches(
            by_index,
            [row.tokens for row in rows],
            buckets,
            min_efficiency=min_efficiency,
            point_cost=point_cost,
        )
        batches = [_build_batch(s.bucket, [rows[i] for i in s.rows]) for s in shapes]
    else:
        rows = _pack_rows(units, buckets, packing)
        by_bucket: dict[Bucket, list[_Row]] = {}
        for row in rows:
            by_bucket.setdefault(buckets.pick(row.tokens, row.points), []).append(row)
        _fill_partial_batches(by_bucket)
        batches = []
        for bucket in sorted(by_bucket, key=lambda x: (-x.length, -x.points)):
            group = by_bucket[bucket]
            for s in range(0, len(group), bucket.rows):
                batches.append(_build_batch(bucket, group[s : s + bucket.rows]))
    plan = ScorePlan(batches=tuple(batches), n_requests=len(requests))
    check_coverage(plan, requests)
    return plan


def check_coverage(plan: ScorePlan, requests: Sequence[TruncatedRequest]) -> None:
    """Every request owns exactly one slot, and that slot has one score point per continuation token."""
    seen = np.zeros(len(requests), np.int64)
    for pb in plan.batches:
        used = pb.slot_request >= 0
        np.add.at(seen, pb.slot_request[used], 1)
        slots = pb.batch.score_slot[pb.batch.score_slot >= 0]
        counts = np.bincount(slots, minlength=pb.bucket.slots)
        want = np.zeros(pb.bucket.slots, np.int64)
        want[used] = [len(requests[i].continuation) for i in pb.slot_request[used]]
        if not np.array_equal(counts, want):
            raise AssertionError(
                "planner bug: a slot's score points do not match its continuation length"
            )
    if not np.all(seen == 1):
        bad = np.flatnonzero(seen != 1)[:10]
        raise AssertionError(
            f"planner bug: requests {bad.tolist()} answered {seen[bad].tolist()} times"
        )
