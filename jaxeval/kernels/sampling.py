"""Next-token choice for generation: greedy argmax, or temperature / top-k / top-p sampling.

Every row carries its own settings (arrays, not static config), so one compiled decode loop serves
greedy and sampled requests side by side. The warpers run in transformers' order and with its
semantics (`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`):

    logits / temperature
    top-k:  keep logits >= the k-th largest (ties at the cut kept); k <= 0 or k >= V keeps all
    top-p:  sort ascending, cumulative softmax; drop tokens whose cumulative probability is
            <= 1 - top_p, always keeping the most likely one; top_p >= 1 keeps all

    probs [0.5, 0.3, 0.15, 0.05], top_p = 0.8 -> ascending cumsum [0.05, 0.2, 0.5, 1.0];
    1 - 0.8 = 0.2 drops the two smallest -> keeps {0.5, 0.3}

Randomness: row keys are `fold_in(fold_in(key(seed), request), repeat)` and step keys
`fold_in(row_key, step)`, sampled per row under `vmap`, so a row's draws depend on nothing but its
own (seed, request, repeat, step) and logits: not on the batch it lands in, nor on the device count.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxeval.shapes import Float, Int

# 1-D shape annotations as names: a lone letter in a string reads as an undefined name to linters
FloatB = Float["B"]
IntB = Int["B"]


class SamplingParams(NamedTuple):
    """Per-row sampling settings (a pytree of [B] arrays)."""

    greedy: jax.Array  # bool[B]: argmax, ignoring the rest
    temperature: jax.Array  # float32[B] (> 0 where sampling)
    top_k: jax.Array  # int32[B]; <= 0 = off
    top_p: jax.Array  # float32[B]; >= 1 = off


def row_keys(seed: Int[""], key_ids: Int["B 2"]) -> jax.Array:
    """[B] typed PRNG keys from (seed, request index, repeat index)."""
    base = jax.random.key(seed.astype(jnp.uint32))

    def one(ids):
        return jax.random.fold_in(jax.random.fold_in(base, ids[0]), ids[1])

    return jax.vmap(one)(key_ids)


def _filter_top_k(logits: Float["B V"], top_k: IntB) -> Float["B V"]:
    v = logits.shape[-1]
    desc = -jnp.sort(-logits, axis=-1)  # [B, V] largest first
    k = jnp.clip(top_k, 1, v)
    kth = jnp.take_along_axis(desc, (k - 1)[:, None], axis=-1)  # [B, 1]
    keep = (logits >= kth) | ((top_k <= 0) | (top_k >= v))[:, None]
    return jnp.where(keep, logits, -jnp.inf)


def _filter_top_p(logits: Float["B V"], top_p: FloatB) -> Float["B V"]:
    asc = jnp.sort(logits, axis=-1)  # [B, V] smallest first
    cum = jnp.cumsum(jax.nn.softmax(asc, axis=-1), axis=-1)  # [B, V]
    removed = cum <= (1.0 - top_p)[:, None]
    n_removed = jnp.minimum(jnp.sum(removed, axis=-1), logits.shape[-1] - 1)  # [B]
    cut = jnp.take_along_axis(asc, n_removed[:, None], axis=-1)  # [B, 1] smallest kept logit
    keep = (logits >= cut) | (top_p >= 1.0)[:, None]
    return jnp.where(keep, logits, -jnp.inf)


def warp_logits(logits: Float["B V"], params: SamplingParams) -> Float["B V"]:
    """Temperature, then top-k, then top-p, in float32 (the sorts run only if some row needs them)."""
    x = logits.astype(jnp.float32)
    temp = jnp.where(params.greedy | (params.temperature <= 0), 1.0, params.temperature)
    x = x / temp[:, None]
    need_k = jnp.any(~params.greedy & (params.top_k > 0) & (params.top_k < x.shape[-1]))
    x = jax.lax.cond(need_k, _filter_top_k, lambda a, _: a, x, params.top_k)
    need_p = jnp.any(~params.greedy & (params.top_p < 1.0))
    return jax.lax.cond(need_p, _filter_top_p, lambda a, _: a, x, params.top_p)


def next_tokens(
    logits: Float["B V"], params: SamplingParams, keys: jax.Array, step: Int[""] | IntB
) -> IntB:
    """One token per row: argmax (first index on ties, as torch) or a draw from the warped logits.

    `step` is the index of the token being picked: one for all rows, or each row's own ([B],
    continuous batching); either way row r's draw uses fold_in(key_r, its token index)."""
    greedy_tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # [B]

    def sample(_):
        warped = warp_logits(logits, params)
        steps = jnp.broadcast_to(jnp.asarray(step, jnp.int32), greedy_tok.shape)  # [B]
        step_keys = jax.vmap(jax.random.fold_in)(keys, steps)
        drawn = jax.vmap(jax.random.categorical)(step_keys, warped)
        return jnp.where(params.greedy, greedy_tok, drawn.astype(jnp.int32))

    return jax.lax.cond(jnp.all(params.greedy), lambda _: greedy_tok, sample, None)
