"""The loglikelihood scoring kernel: packed rows in, per-request (loglik, is_greedy) out.

A loglikelihood request scores continuation token t_k from the hidden state at the position just
before it. The planner (`jaxeval.lm.score.planner`) lays requests out in rows and lists, per row, K
*score points* `(position, target, slot)`. The kernel runs the model body over the rows, gathers the
hidden states at the score points only, and applies the LM head there in vocabulary chunks with a
float32 online logsumexp, so neither [B, T, V] nor [B, K, V] is ever materialised:

    row tokens    <s>  Q   :   A  | B                     (context segment 1; choice " A B" is
    segment        1   1   1   2    3                      segment 2, choice " C" has no input token,
    parent         0   0   0   1    1                      choice " D E" is segment 3: all parent 1)
    score points  (pos 2 -> " A", slot 0) (pos 3 -> " B", slot 0)
                  (pos 2 -> " C", slot 1)
                  (pos 2 -> " D", slot 2) (pos 4 -> " E", slot 2)

The log-probabilities are `(logit - max) - log(sum(exp(logit - max)))` in float32, the same
expression torch's log_softmax evaluates. `is_greedy` reproduces `argmax(log_softmax(logits)) ==
target` with torch's first-index tie rule, in one pass: the target must reach the maximum
log-probability and no smaller vocabulary index may reach the target's log-probability.

A model without a [V, D] head matrix (a `FunctionModel` that offers only `head(params, h)` or
`logits(...)`) cannot be chunked: `score_points` takes its logits at the score points,
`model.point_logits(...)` -> [B, K, V], and reduces them with the same float32 expressions and the
same first-index tie rule.

Dimension names: `jaxeval.shapes`. The LM head runs on the B*K score points flattened, Vc
vocabulary entries at a time, and their sums land in the S request slots.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxeval.models.contract import DecoderModel
from jaxeval.models.runtime import REFERENCE, Runtime
from jaxeval.shapes import Float, Int, pow2_at_most

# Elements of one [B*K, Vc] float32 logits block: 2**22 * 4 bytes = 16 MiB (the memory bound).
_CHUNK_ELEMENTS = 1 << 22
# The block the kernel uses by default: 2**20 * 4 bytes = 4 MiB stays in cache while the chunk's
# four reductions read it, where a larger block is read back from memory (the head's timings by
# chunk size: docs/performance.md, "Long rows and 8k context").
_FAST_CHUNK_ELEMENTS = 1 << 20
_MIN_CHUNK = 256


class ScoreBatch(NamedTuple):
    """One batch of packed rows (a pytree; the planner fills it with numpy int32 arrays).

    Padding is explicit: padding tokens and padding rows have segment 0 (seen by no one), unused
    score points have slot -1 (and position/target -1).
    """

    tokens: Int["B T"]  # token ids
    positions: Int["B T"]  # position ids, restarting at 0 in each context segment
    segment: Int["B T"]  # segment id per token, 1.. within a row; 0 = padding
    parent: Int["B T"]  # the segment a child segment also attends to (its shared context); 0 = none
    score_pos: Int["B K"]  # row position whose hidden state predicts the target; -1 = none
    score_tgt: Int["B K"]  # target token id; -1 = none
    score_slot: Int["B K"]  # request slot in [0, S) the point adds to; -1 = none


class ScoreResult(NamedTuple):
    loglik: jax.Array  # float32[S]: sum of log-probabilities of each slot's targets
    is_greedy: jax.Array  # bool[S]: every target of the slot is the argmax (first index on ties)


def default_vocab_chunk(n_points: int, vocab: int, *, block_elements: int = _CHUNK_ELEMENTS) -> int:
    """A vocabulary chunk Vc so that one [B*K, Vc] float32 block stays near `block_elements` (16 MiB
    by default; at least 256 wide)."""
    chunk = max(_MIN_CHUNK, block_elements // max(1, n_points))
    chunk = pow2_at_most(chunk)
    return min(chunk, vocab)


def fast_vocab_chunk(n_points: int, vocab: int) -> int:
    """The chunk `score` and the scorer use: blocks near 4 MiB (`_FAST_CHUNK_ELEMENTS`)."""
    return default_vocab_chunk(n_points, vocab, block_elements=_FAST_CHUNK_ELEMENTS)


class HeadStats(NamedTuple):
    target_lp: jax.Array  # float32[B*K]: log P(target)
    max_lp: jax.Array  # float32[B*K]: max log-probability over the vocabulary
    before_lp: jax.Array  # float32[B*K]: max over vocabulary ids < target (-inf if none)


def head_stats(
    h: Float["B*K D"],
    head_weight: Float["V D"],
    targets: jax.Array,
    *,
    finalize_logits,
    vocab_chunk: int,
) -> HeadStats:
    """Streams the LM head over vocabulary chunks: online logsumexp, target logit, max before target.

    Shapes: h [B*K, D], head_weight [V, D], targets int32[B*K]. Chunk c covers the Vc = `chunk` ids
    [c*chunk, (c+1)*chunk); the last chunk is slid back to end at V (no padded copy of the head
    weight) and its already-seen columns are masked out.
    """
    vocab = head_weight.shape[0]
    chunk = min(vocab_chunk, vocab)
    n_chunks = -(-vocab // chunk)
    n_points = h.shape[0]
    neg_inf = jnp.full((n_points,), -jnp.inf, jnp.float32)

    def body(c, carry):
        run_max, run_sum, tgt_logit, before_max = carry
        nominal = c * chunk
        start = jnp.minimum(nominal, vocab - chunk)
        w = lax.dynamic_slice_in_dim(head_weight, start, chunk, axis=0)  # [Vc, D]
        logits = jnp.dot(h, w.T, preferred_element_type=jnp.float32)  # [B*K, Vc]
        logits = finalize_logits(logits).astype(jnp.float32)
        cols = start + jnp.arange(chunk, dtype=jnp.int32)  # [Vc]
        fresh = (cols >= nominal)[None, :]  # [1, Vc]
        masked = jnp.where(fresh, logits, -jnp.inf)  # [B*K, Vc]
        new_max = jnp.maximum(run_max, masked.max(axis=-1))  # [B*K]
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.exp(masked - new_max[:, None]).sum(
            axis=-1
        )
        local = jnp.clip(targets - start, 0, chunk - 1)
        here = (targets >= nominal) & (targets < start + chunk)
        t = jnp.take_along_axis(logits, local[:, None], axis=-1)[:, 0]  # [B*K]
        tgt_logit = jnp.where(here, t, tgt_logit)
        below = jnp.where(cols[None, :] < targets[:, None], masked, -jnp.inf)  # [B*K, Vc]
        before_max = jnp.maximum(before_max, below.max(axis=-1))
        return new_max, run_sum, tgt_logit, before_max

    init = (neg_inf, jnp.zeros((n_points,), jnp.float32), neg_inf, neg_inf)
    run_max, run_sum, tgt_logit, before_max = lax.fori_loop(0, n_chunks, body, init)
    log_sum = jnp.log(run_sum)
    return HeadStats(
        target_lp=(tgt_logit - run_max) - log_sum,
        max_lp=(run_max - run_max) - log_sum,
        before_lp=(before_max - run_max) - log_sum,
    )


# Grid of the exact integer part of a split float sum: log-probs are summed as round(x * 2**8)
# (int32, exact and order-free) plus the small remainders (|r| <= 2**-9) in float32.
_SUM_GRID = 256.0


def segment_sum_f32(values: jax.Array, segment_ids: jax.Array, num_segments: int) -> jax.Array:
    """A float32 segment sum that is (nearly) correctly rounded and independent of summation order.

    Each value splits exactly into a multiple of 2**-8, summed as int32 (exact, any order), and a
    remainder below 2**-9 in magnitude, summed in float32 (its rounding error is ~1e-7 of a small
    number). So per-request sums do not depend on where the planner put the request's tokens, and
    long continuations keep their precision: values [B*K] float32 -> [num_segments] float32.
    """
    scaled = jnp.round(values * _SUM_GRID)  # exact for |values| < 65536
    rest = values - scaled / _SUM_GRID  # exact
    whole = jax.ops.segment_sum(scaled.astype(jnp.int32), segment_ids, num_segments=num_segments)
    small = jax.ops.segment_sum(rest, segment_ids, num_segments=num_segments)
    # Without the barrier XLA folds `whole + scatter_add(0, rest)` into `scatter_add(whole, rest)`,
    # accumulating the remainders onto the large value one rounding at a time.
    small = lax.optimization_barrier(small)
    return whole.astype(jnp.float32) / _SUM_GRID + small


def score(
    params: Any,
    batch: ScoreBatch,
    *,
    model: DecoderModel,
    runtime: Runtime = REFERENCE,
    n_slots: int,
    vocab_chunk: int | None = None,
) -> ScoreResult:
    """Per-slot loglikelihood and greedy flag for one batch of packed rows.

    `model` is a hashable model spec (static): `hidden(params, tokens, positions, segment, parent,
    *, runtime) -> [B, T, D]`, `head_weight(params) -> [V, D]`, `finalize_logits(logits)`;
    `runtime` (static) how it runs (`jaxeval.models.runtime`).
    """
    n_rows, length = batch.tokens.shape
    n_points = batch.score_pos.shape[1]
    h = model.hidden(
        params, batch.tokens, batch.positions, batch.segment, batch.parent, runtime=runtime
    )  # [B, T, D]
    pos = jnp.clip(batch.score_pos, 0, length - 1)
    hk = jnp.take_along_axis(h, pos[:, :, None], axis=1)  # [B, K, D]
    hk = hk.reshape(n_rows * n_points, h.shape[-1])  # [B*K, D]
    weight = model.head_weight(params)  # [V, D]
    vocab = weight.shape[0]
    targets = jnp.clip(batch.score_tgt.reshape(-1), 0, vocab - 1)  # [B*K]
    chunk = vocab_chunk or fast_vocab_chunk(n_rows * n_points, vocab)
    stats = head_stats(
        hk, weight, targets, finalize_logits=model.finalize_logits, vocab_chunk=chunk
    )
    greedy = (stats.target_lp >= stats.max_lp) & (stats.before_lp < stats.target_lp)  # [B*K]

    slot = batch.score_slot.reshape(-1)  # [B*K]
    valid = slot >= 0
    seg = jnp.where(valid, slot, n_slots)  # invalid points go to a discarded extra slot
    loglik = segment_sum_f32(jnp.where(valid, stats.target_lp, 0.0), seg, n_slots + 1)
    misses = jax.ops.segment_sum((valid & ~greedy).astype(jnp.int32), seg, num_segments=n_slots + 1)
    return ScoreResult(loglik=loglik[:n_slots], is_greedy=misses[:n_slots] == 0)


def score_points(
    params: Any,
    batch: ScoreBatch,
    *,
    model: Any,
    runtime: Runtime = REFERENCE,
    n_slots: int,
) -> ScoreResult:
    """`score` for a model without `has_head_weight`: per-slot loglikelihood and greedy flag from
    its logits at the score points, `model.point_logits(params, tokens, positions, segment,
    parent, points)` -> [B, K, V] (module docstring). `runtime` (static) is `score`'s; such a model
    runs its own function, which does not take one."""
    del runtime  # in the executable's key like `score`'s; the model's own function runs as it is
    length = batch.tokens.shape[1]
    points = jnp.clip(batch.score_pos, 0, length - 1)  # [B, K]
    logits = model.point_logits(
        params, batch.tokens, batch.positions, batch.segment, batch.parent, points
    )  # [B, K, V]
    vocab = logits.shape[-1]
    logits = logits.reshape(-1, vocab).astype(jnp.float32)  # [B*K, V]
    targets = jnp.clip(batch.score_tgt.reshape(-1), 0, vocab - 1)  # [B*K]
    top = logits.max(axis=-1)  # [B*K]
    log_sum = jnp.log(jnp.exp(logits - top[:, None]).sum(axis=-1))  # [B*K]
    target_logit = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    ids = jnp.arange(vocab, dtype=jnp.int32)
    before = jnp.where(ids[None, :] < targets[:, None], logits, -jnp.inf).max(axis=-1)
    target_lp = (target_logit - top) - log_sum
    max_lp = (top - top) - log_sum
    before_lp = (before - top) - log_sum
    greedy = (target_lp >= max_lp) & (before_lp < target_lp)  # [B*K]

    slot = batch.score_slot.reshape(-1)  # [B*K]
    valid = slot >= 0
    seg = jnp.where(valid, slot, n_slots)  # invalid points go to a discarded extra slot
    loglik = segment_sum_f32(jnp.where(valid, target_lp, 0.0), seg, n_slots + 1)
    misses = jax.ops.segment_sum((valid & ~greedy).astype(jnp.int32), seg, num_segments=n_slots + 1)
    return ScoreResult(loglik=loglik[:n_slots], is_greedy=misses[:n_slots] == 0)
