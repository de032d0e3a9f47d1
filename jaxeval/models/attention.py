"""Attention masks and grouped-query attention, shared by the packed forward and the KV-cache path.

**Packed rows.** Query i sees key j iff

    segment[j] != 0  and  j <= i  and  (segment[j] == segment[i] or segment[j] == parent[i])

plus, on sliding-window layers, `positions[i] - positions[j] < window`. Positions, not indices:
a child segment continues its parent's positions. Two requests (a, b) and a shared context c with
choices x (parent c) and y (parent c), in one row:

    index     0  1  2  3  4  5  6  7  8        allowed keys for query 6 (y0): 2, 3, 4 (c) and 6
    segment   1  1  2  2  2  3  3  4  0        (3 and 4 are different children; 8 is padding)
    parent    0  0  0  0  0  2  2  2  0        with [segment 2 = c, 3 = x, 4 = y]
    position  0  1  0  1  2  3  4  3  0        y continues c: positions 3, 4

**KV cache.** Query t (cache slot index + t) sees slot j iff `valid[j] and j <= index + t` (plus the
window on positions). Fully masked rows (padding) get a finite large negative score everywhere, so
their softmax is uniform and finite, never NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxeval.models.layers import HIGHEST, dense, norm
from jaxeval.models.rope import apply_rope
from jaxeval.shapes import Bool, Float, Int

MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: fully-masked rows stay NaN-free
NO_WINDOW = 2**30  # a window size that never masks anything

KVUpdate = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def packed_mask(segment: Int["B T"], parent: Int["B T"]) -> Bool["B T T"]:
    """The packing rule above (no window): [B, T(query), T(key)]."""
    t = segment.shape[1]
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]  # [T, T]
    seg_q, par_q = segment[:, :, None], parent[:, :, None]  # [B, T, 1]
    seg_k = segment[:, None, :]  # [B, 1, T]
    related = (seg_k == seg_q) | (seg_k == par_q)
    return (seg_k != 0) & causal[None] & related


def cache_mask(valid: Bool["B C"], index: Int[""], length: int) -> Bool["B T C"]:
    """Query t (slot index + t) sees cache slot j iff valid[j] and j <= index + t."""
    slots = jnp.arange(valid.shape[1])  # [C]
    query_slots = index + jnp.arange(length)  # [T]
    causal = slots[None, :] <= query_slots[:, None]  # [T, C]
    return valid[:, None, :] & causal[None]


def window_mask(q_positions: Int["B T"], k_positions: Int["B S"], window: Int[""]) -> Bool["B T S"]:
    """True where the key lies inside the query's sliding window (`NO_WINDOW` keeps everything)."""
    return (q_positions[:, :, None] - k_positions[:, None, :]) < window


def attend(
    q: Float["B T H E"],
    k: Float["B S G E"],
    v: Float["B S G E"],
    allowed: Bool["B T S"],
    *,
    scale: Float[""],
    softcap: float | None,
) -> Float["B T H E"]:
    """Grouped-query softmax attention; query head h reads kv head h // (H // G), as HF's repeat_kv.

    Scores are computed in the compute dtype and scaled after the matmul (HF's order), soft-capped,
    then the softmax runs in float32 and the weights are cast back before multiplying the values.
    """
    b, t, h, e = q.shape
    g = k.shape[2]
    q = q.reshape(b, t, g, h // g, e)  # [B, T, G, R, E]
    scores = jnp.einsum("btgre,bsge->bgrts", q, k, precision=HIGHEST) * scale.astype(q.dtype)
    if softcap is not None:
        scores = jnp.tanh(scores / softcap) * softcap
    scores = jnp.where(
        allowed[:, None, None], scores.astype(jnp.float32), MASKED
    )  # [B, G, R, T, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bgrts,bsge->btgre", probs, v, precision=HIGHEST)
    return out.reshape(b, t, h, e)


def _norm_heads(p: dict[str, jax.Array], x: Float["B T H E"], *, kind: str, eps: float):
    b, t, h, e = x.shape
    flat = {name: w.reshape(h * e) for name, w in p.items()}
    return norm(flat, x.reshape(b, t, h * e), kind=kind, eps=eps).reshape(b, t, h, e)


def attention_block(
    spec,
    p: dict[str, jax.Array],
    x: Float["B T D"],
    *,
    cos: Float["B T E"] | None,
    sin: Float["B T E"] | None,
    allowed: Bool["B T S"],
    scale: Float[""],
    kv_update: KVUpdate,
) -> Float["B T D"]:
    """Projections, optional q/k norms, rotary, then `kv_update(k, v) -> (keys, values)`, attention.

    `kv_update` is the identity for the packed forward and a cache write for generation; either way
    it returns the keys/values the queries attend to ([B, S, G, E], S = T or the cache length C).
    """
    q = dense(x, p["q"], "btd,dhe->bthe", p.get("q_bias"))  # [B, T, H, E]
    k = dense(x, p["k"], "btd,dge->btge", p.get("k_bias"))  # [B, T, G, E]
    v = dense(x, p["v"], "btd,dge->btge", p.get("v_bias"))  # [B, T, G, E]
    if spec.qk_norm == "head":  # over E, per head
        q = norm(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = norm(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    elif spec.qk_norm == "heads":  # over all H*E features of the projection
        q = _norm_heads(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = _norm_heads(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    if cos is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    keys, values = kv_update(k, v)
    out = attend(q, keys, values, allowed, scale=scale, softcap=spec.attn_softcap)
    return dense(out, p["o"], "bthe,hed->btd", p.get("o_bias"))
