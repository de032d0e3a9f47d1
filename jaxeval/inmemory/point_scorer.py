"""Scoring for models without a [V, D] head matrix: the head (or the full logits) at score points.

    score_points(params, batch, *, model, n_slots) -> ScoreResult(loglik [S], is_greedy [S])

The usual kernel (`jaxeval.kernels.score`) streams `head_weight` over vocabulary chunks. A model
that only offers `head(params, h)` or `logits(...)` (`FunctionModel`) cannot be chunked, so this
kernel takes `model.point_logits(...)` -> [B, K, V] at the score points and reduces them with the
same float32 expressions and the same first-index tie rule:

    lp = (logit - max) - log(sum(exp(logit - max)))           (torch's log_softmax)
    is_greedy: lp[target] reaches the row maximum, and no smaller vocabulary id reaches lp[target]

`PointScorer` is the `Scorer` that lowers this kernel for such models and the usual one otherwise;
batches, shardings, compile-once-per-shape and the exactly-once check are the `Scorer`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.kernels.score import ScoreBatch, ScoreResult, segment_sum_f32
from jaxeval.lm.score.buckets import Bucket
from jaxeval.lm.score.scorer import Scorer


def score_points(params: Any, batch: ScoreBatch, *, model: Any, n_slots: int) -> ScoreResult:
    """Per-slot loglikelihood and greedy flag from the logits at the score points (module docstring)."""
    length = batch.tokens.shape[1]
    points = jnp.clip(batch.score_pos, 0, length - 1)  # [B, K]
    logits = model.point_logits(
        params, batch.tokens, batch.positions, batch.segment, batch.parent, points
    )  # [B, K, V]
    vocab = logits.shape[-1]
    logits = logits.reshape(-1, vocab).astype(jnp.float32)  # [P, V]
    targets = jnp.clip(batch.score_tgt.reshape(-1), 0, vocab - 1)  # [P]
    top = logits.max(axis=-1)  # [P]
    log_sum = jnp.log(jnp.exp(logits - top[:, None]).sum(axis=-1))  # [P]
    target_logit = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    ids = jnp.arange(vocab, dtype=jnp.int32)
    before = jnp.where(ids[None, :] < targets[:, None], logits, -jnp.inf).max(axis=-1)
    target_lp = (target_logit - top) - log_sum
    max_lp = (top - top) - log_sum
    before_lp = (before - top) - log_sum
    greedy = (target_lp >= max_lp) & (before_lp < target_lp)  # [P]

    slot = batch.score_slot.reshape(-1)  # [P]
    valid = slot >= 0
    seg = jnp.where(valid, slot, n_slots)  # invalid points go to a discarded extra slot
    loglik = segment_sum_f32(jnp.where(valid, target_lp, 0.0), seg, n_slots + 1)
    misses = jax.ops.segment_sum((valid & ~greedy).astype(jnp.int32), seg, num_segments=n_slots + 1)
    return ScoreResult(loglik=loglik[:n_slots], is_greedy=misses[:n_slots] == 0)


class PointScorer(Scorer):
    """A `Scorer` whose kernel is `score_points` for models without `has_head_weight` (the same
    sharding boundary, executables and counters: `Scorer.job`)."""

    def kernel(self, bucket: Bucket) -> Callable:
        if getattr(self.model, "has_head_weight", True):
            return super().kernel(bucket)
        return functools.partial(score_points, model=self.model, n_slots=bucket.slots)
