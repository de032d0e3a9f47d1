"""The scoring kernel against a naive full-vocabulary reference, on a toy model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxeval.kernels.score import default_vocab_chunk, head_stats, score
from jaxeval.lm.encoding import truncate_request
from jaxeval.lm.score.buckets import make_buckets
from jaxeval.lm.score.planner import plan_score_batches
from jaxeval.lm.score.scorer import Scorer, answer_arrays
from tests.kernels.toy_model import ToyModel, greedy_continuation, reference_score


def _naive_stats(h, w, targets, finalize=lambda x: x):
    logits = np.asarray(finalize(jnp.asarray(h @ w.T)), np.float32)
    m = logits.max(-1, keepdims=True)
    lp = (logits - m) - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    return lp[np.arange(len(targets)), targets], lp.argmax(-1)


@pytest.mark.parametrize("chunk", [7, 32, 100, 101])
def test_head_stats_matches_full_log_softmax(chunk):
    rng = np.random.default_rng(0)
    v, d, p = 101, 8, 12
    w = rng.normal(size=(v, d)).astype(np.float32)
    w[20] *= 4
    w[50] = w[20]  # exact duplicate rows: logits tie exactly
    h = rng.normal(size=(p, d)).astype(np.float32)
    argmax_full = (h @ w.T).argmax(-1)
    targets = np.array(list(argmax_full[:6]) + [20, 50, 0, 100, 3, 4], np.int32)
    h[6] = h[7] = w[20] * 5  # the tied pair (20, 50) is the max: argmax is 20 (first index)
    stats = head_stats(
        jnp.asarray(h),
        jnp.asarray(w),
        jnp.asarray(targets),
        finalize_logits=lambda x: x,
        vocab_chunk=chunk,
    )
    want_lp, want_arg = _naive_stats(h, w, targets)
    np.testing.assert_allclose(np.asarray(stats.target_lp), want_lp, atol=1e-5)
    greedy = (stats.target_lp >= stats.max_lp) & (stats.before_lp < stats.target_lp)
    np.testing.assert_array_equal(np.asarray(greedy), want_arg == targets)
    assert bool(greedy[6]) and not bool(greedy[7])  # tie: the first index wins, as in torch


def test_default_vocab_chunk_is_bounded():
    assert default_vocab_chunk(8192, 131072) == 512
    assert default_vocab_chunk(1, 50) == 50
    assert default_vocab_chunk(10**9, 131072) == 256


def _requests(model, params, rng, n=24):
    reqs, shared_ctx = [], list(rng.integers(1, model.vocab_size, size=9))
    for i in range(n):
        ctx = (
            shared_ctx
            if i % 3 == 0
            else list(rng.integers(1, model.vocab_size, size=int(rng.integers(1, 20))))
        )
        if i % 4 == 1:
            cont = greedy_continuation(model, params, ctx, int(rng.integers(1, 4)))
        else:
            cont = list(rng.integers(1, model.vocab_size, size=int(rng.integers(1, 6))))
        reqs.append((ctx, cont))
    return reqs


@pytest.fixture(scope="module", params=[None, 5.0], ids=["plain", "softcap"])
def toy(request):
    model = ToyModel(softcap=request.param)
    return model, model.init(0)


@pytest.mark.parametrize(
    "packing,shared", [(True, True), (True, False), (False, True), (False, False)]
)
@pytest.mark.slow
def test_score_matches_unpacked_reference(toy, packing, shared):
    model, params = toy
    rng = np.random.default_rng(1)
    pairs = _requests(model, params, rng)
    reqs = [truncate_request(c, x, 32) for c, x in pairs]
    buckets = make_buckets(max_length=32, token_budget=128, lengths=[16, 32])
    plan = plan_score_batches(reqs, buckets, packing=packing, shared_context=shared)
    scorer = Scorer(
        model=model,
        params=params,
        mesh=Mesh(np.array(jax.devices()[:1]), ("data",)),
        buckets=buckets,
        vocab_chunk=16,
    )
    ll, greedy = answer_arrays(scorer.run_plan(plan), plan.n_requests)
    want = [reference_score(model, params, r.context, r.continuation) for r in reqs]
    np.testing.assert_allclose(ll, [w[0] for w in want], atol=2e-5)
    np.testing.assert_array_equal(greedy, [w[1] for w in want])
    assert greedy.any() and not greedy.all()


def test_memory_stays_far_below_full_logits():
    """A 128k vocabulary: the compiled kernel's temporaries are a small fraction of B*T*V*4 bytes."""
    model = ToyModel(vocab_size=131072, width=64, max_position_embeddings=256)
    params = jax.eval_shape(lambda: model.init(0))
    b, t, k = 8, 256, 256
    batch_sd = jax.ShapeDtypeStruct((b, t), jnp.int32)
    pts_sd = jax.ShapeDtypeStruct((b, k), jnp.int32)
    from jaxeval.kernels.score import ScoreBatch

    batch = ScoreBatch(batch_sd, batch_sd, batch_sd, batch_sd, pts_sd, pts_sd, pts_sd)
    compiled = (
        jax.jit(score, static_argnames=("model", "n_slots", "vocab_chunk"))
        .lower(params, batch, model=model, n_slots=b * k)
        .compile()
    )
    mem = compiled.memory_analysis()
    full = b * t * model.vocab_size * 4
    print(f"temp={mem.temp_size_in_bytes / 2**20:.1f} MiB vs full logits {full / 2**20:.0f} MiB")
    assert mem.temp_size_in_bytes < 0.1 * full
