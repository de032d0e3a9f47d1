"""Planner and bucket rules on synthetic token requests (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxeval.errors import JaxevalError
from jaxeval.lm.encoding import TruncatedRequest, truncate_request
from jaxeval.lm.score.buckets import Bucket, BucketSet, make_buckets, parse_buckets
from jaxeval.lm.score.planner import check_coverage, plan_score_batches


def req(ctx, cont):
    return TruncatedRequest(context=tuple(ctx), continuation=tuple(cont), truncated=0)


def test_shared_context_layout_golden():
    """The docstring example: context [5, 6, 7], continuations [8, 9] and [4]."""
    buckets = BucketSet(buckets=(Bucket(length=8, points=4, rows=1),))
    plan = plan_score_batches([req([5, 6, 7], [8, 9]), req([5, 6, 7], [4])], buckets)
    (pb,) = plan.batches
    b = pb.batch
    assert b.tokens.tolist() == [[5, 6, 7, 8, 0, 0, 0, 0]]
    assert b.positions.tolist() == [[0, 1, 2, 3, 0, 0, 0, 0]]
    assert b.segment.tolist() == [[1, 1, 1, 2, 0, 0, 0, 0]]
    assert b.parent.tolist() == [[0, 0, 0, 1, 0, 0, 0, 0]]
    assert b.score_pos.tolist() == [[2, 3, 2, -1]]
    assert b.score_tgt.tolist() == [[8, 9, 4, -1]]
    assert b.score_slot.tolist() == [[0, 0, 1, -1]]
    assert pb.slot_request[:2].tolist() == [0, 1] and (pb.slot_request[2:] == -1).all()
    assert plan.real_tokens == 4 and plan.computed_tokens == 8


def test_unshared_layout_restarts_positions():
    buckets = BucketSet(buckets=(Bucket(length=8, points=8, rows=1),))
    plan = plan_score_batches(
        [req([5, 6, 7], [8, 9]), req([1, 2], [3])], buckets, shared_context=False
    )
    b = plan.batches[0].batch
    assert b.tokens.tolist() == [[5, 6, 7, 8, 1, 2, 0, 0]]
    assert b.positions.tolist() == [[0, 1, 2, 3, 0, 1, 0, 0]]
    assert b.segment.tolist() == [[1, 1, 1, 2, 3, 3, 0, 0]]
    assert b.parent.tolist() == [[0, 0, 0, 1, 0, 0, 0, 0]]
    assert b.score_pos.tolist()[0][:3] == [2, 3, 5]


def _random_requests(rng, n, max_len):
    reqs, shared = [], list(rng.integers(1, 50, size=12))
    for i in range(n):
        ctx = (
            shared
            if i % 4 == 0
            else list(rng.integers(1, 50, size=int(rng.integers(1, max_len // 2))))
        )
        cont = list(rng.integers(1, 50, size=int(rng.integers(1, max_len // 4))))
        reqs.append(truncate_request(ctx, cont, max_len))
    return reqs


@pytest.mark.parametrize("packing", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_every_request_is_answered_once_and_shapes_are_buckets(packing, shared):
    rng = np.random.default_rng(0)
    reqs = _random_requests(rng, 300, 64)
    buckets = make_buckets(max_length=64, token_budget=256, lengths=[16, 32, 64], row_multiple=2)
    plan = plan_score_batches(reqs, buckets, packing=packing, shared_context=shared)
    shapes = {(b.length, b.points, b.rows) for b in buckets}
    for pb in plan.batches:
        b = pb.batch
        assert (b.tokens.shape[0], b.tokens.shape[1], b.score_pos.shape[1]) in {
            (r, t, k) for t, k, r in shapes
        }
        assert all(a.dtype == np.int32 for a in b)
        # every score point looks at a real token of its own row, inside the request's segments
        used = b.score_slot >= 0
        rows = np.nonzero(used)[0]
        assert (b.segment[rows, b.score_pos[used]] > 0).all()
    check_coverage(plan, reqs)
    if packing:
        assert plan.efficiency > 0.7


def test_packing_is_deterministic_and_fills_rows():
    rng = np.random.default_rng(1)
    reqs = _random_requests(rng, 500, 128)
    buckets = make_buckets(max_length=128, token_budget=1024, lengths=[32, 64, 128])
    a = plan_score_batches(reqs, buckets)
    b = plan_score_batches(reqs, buckets)
    assert [x.batch.tokens.tobytes() for x in a.batches] == [
        x.batch.tokens.tobytes() for x in b.batches
    ]
    unpacked = plan_score_batches(reqs, buckets, packing=False, shared_context=False)
    assert a.computed_tokens < 0.75 * unpacked.computed_tokens
    assert a.efficiency > 0.9


def test_big_shared_group_is_split_across_rows():
    """Thousands of requests with one context (acc_mutual_info's [BOS]-style) never overflow a row."""
    ctx = [3, 4, 5]
    reqs = [req(ctx, [10 + i % 7] * (1 + i % 3)) for i in range(400)]
    buckets = make_buckets(max_length=32, token_budget=128, lengths=[16, 32])
    plan = plan_score_batches(reqs, buckets)
    check_coverage(plan, reqs)
    assert len(plan.batches) > 1


def test_oversize_request_is_rejected_not_dropped():
    buckets = make_buckets(max_length=16, token_budget=64, lengths=[16])
    with pytest.raises(ValueError, match="truncate"):
        plan_score_batches([req(list(range(1, 20)), [1, 2])], buckets)


def test_buckets_are_sorted_validated_and_cover_max_length():
    b = make_buckets(max_length=2048, token_budget=16384)
    assert [(x.length, x.points, x.rows) for x in b][:2] == [(256, 32, 64), (256, 256, 64)]
    assert b.max_length == 2048 and len(b) == 8
    assert make_buckets(max_length=100, token_budget=1000, row_multiple=8).buckets[-1].length == 104
    eights = make_buckets(max_length=4096, token_budget=4096, row_multiple=8)
    assert all(x.rows % 8 == 0 for x in eights)
    # rows of 2,048 and 4,096 tokens split their tokens over the 8 devices: a last batch may
    # hold fewer than 8 (`shaping`)
    assert [eights.multiple_at(t) for t in (1024, 2048, 3072, 4096)] == [8, 1, 8, 1]
    with pytest.raises(JaxevalError):
        make_buckets(max_length=512, lengths=[128, 256])
    with pytest.raises(ValueError):
        BucketSet(buckets=(Bucket(length=8, points=8, rows=1), Bucket(length=4, points=4, rows=1)))
    assert parse_buckets("64,128", max_length=128, token_budget=512).lengths() == (64, 128)
    pairs = parse_buckets([(128, 16), (128, 128)], max_length=128, token_budget=512)
    assert [(x.length, x.points, x.rows) for x in pairs] == [(128, 16, 4), (128, 128, 4)]
    assert b.pick(300, 10) == Bucket(length=512, points=64, rows=32)
    assert b.pick(300, 100) == Bucket(length=512, points=512, rows=32)
