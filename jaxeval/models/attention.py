"""Attention masks and grouped-query attention: dense, blocked (flash-style) and KV-cache paths.

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
window on positions); `index` is shared by all rows or given per row (continuous batching).

**Three ways to attend, one rule.** `attend` builds the full [B, H, T, J] float32 scores (short
rows). `blocked_attend` walks query blocks of Q rows and, for each, only the key blocks (also Q
rows) that some row can see, with an online softmax in float32, so its memory is O(B H Q Q) and it
skips the masked upper triangle, other requests' segments and keys outside every window.
`cache_attend` walks cache blocks up to the last written slot (`index + T`), never reading the
unwritten tail. Block visibility for rows of T = 8 in blocks of Q = 2, so A = 4 blocks per row (a: a
3-token request, b: 2 tokens, c: a context with one child x; `#` = visited block, `.` = skipped):

    segment   a a a b b c c x        key block  0 1 2 3        query block 2 (tokens 4, 5 = b, c)
    parent    0 0 0 0 0 0 0 c        query 0    # . . .        sees key block 1 (token 3 = b) and
                                           1    # # . .        block 2; block 0 (a only) is skipped
                                           2    . # # .
                                           3    . . # #

Fully masked queries (padding) stay finite: the dense path gives them a uniform softmax, the blocked
paths the mean of the values they visited or zero; their outputs are never read.

Dimension names: `jaxeval.shapes`. The keys J are the row's own T tokens in packed rows and the C
cache slots with a KV cache; query head h reads key/value head h // X (X = H / G).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models.layers import HIGHEST, dense, norm
from jaxeval.models.mla import mla_latent_output, mla_latent_qkv, mla_output, mla_qkv
from jaxeval.models.rope import apply_rope
from jaxeval.shapes import Bool, Float, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters
FloatH = Float["H"]

MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: fully-masked rows stay NaN-free
NO_WINDOW = 2**30  # a window size that never masks anything
_FAR = 2**29  # a position sentinel: far beyond any real position, and FAR - 0 < NO_WINDOW

# attend(q [B, T, H, E], k [B, T, G, E], v [B, T, G, E]) -> (out [B, T, H, E], aux): the keys and
# values are this call's; `aux` is whatever the caller needs back (the updated cache, or None).
AttendFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]


def packed_mask(segment: Int["B T"], parent: Int["B T"]) -> Bool["B T T"]:
    """The packing rule above (no window): [B, T(query), T(key)]."""
    t = segment.shape[1]
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]  # [T, T]
    seg_q, par_q = segment[:, :, None], parent[:, :, None]  # [B, T, 1]
    seg_k = segment[:, None, :]  # [B, 1, T]
    related = (seg_k == seg_q) | (seg_k == par_q)
    return (seg_k != 0) & causal[None] & related


def cache_mask(valid: Bool["B C"], index: Int[""] | IntB, length: int) -> Bool["B T C"]:
    """Query t (slot index + t) sees cache slot j iff valid[j] and j <= index + t (`index`: one
    for all rows, or one per row)."""
    slots = jnp.arange(valid.shape[1])  # [C]
    row_index = jnp.broadcast_to(jnp.asarray(index), valid.shape[:1])  # [B]
    query_slots = row_index[:, None] + jnp.arange(length)[None, :]  # [B, T]
    causal = slots[None, None, :] <= query_slots[:, :, None]  # [B, T, C]
    return valid[:, None, :] & causal


def window_mask(q_positions: Int["B T"], k_positions: Int["B J"], window: Int[""]) -> Bool["B T J"]:
    """True where the key lies inside the query's sliding window (`NO_WINDOW` keeps everything)."""
    return (q_positions[:, :, None] - k_positions[:, None, :]) < window


def _scaled(s: jax.Array, scale, softcap: float | None) -> jax.Array:
    """Raw q.k scores in the compute dtype, scaled after the matmul (HF's order), then soft-capped
    (Gemma-2); the mask comes after. Every attention path applies this one rule."""
    s = s * scale.astype(s.dtype)
    if softcap is not None:
        s = jnp.tanh(s / softcap) * softcap
    return s


def _scores(q: jax.Array, k: jax.Array, scale, softcap: float | None) -> jax.Array:
    """q [B, T, G, X, E] . k [B, J, G, E] -> [B, G, X, T, J], `_scaled`."""
    return _scaled(jnp.einsum("btgre,bsge->bgrts", q, k, precision=HIGHEST), scale, softcap)


def attend(
    q: Float["B T H E"],
    k: Float["B J G E"],
    v: Float["B J G E"],
    allowed: Bool["B T J"],
    *,
    scale: Float[""],
    softcap: float | None,
    sinks: FloatH | None = None,
) -> Float["B T H E"]:
    """Dense grouped-query attention; query head h reads kv head h // (H // G), as HF's repeat_kv.

    Scores are computed in the compute dtype and scaled after the matmul (HF's order), soft-capped,
    then the softmax runs in float32 and the weights are cast back before multiplying the values.
    `sinks` (gpt-oss): one more logit per head in the softmax, whose weight multiplies no value.
    """
    b, t, h, e = q.shape
    g = k.shape[2]
    q = q.reshape(b, t, g, h // g, e)  # [B, T, G, X, E]
    scores = _scores(q, k, scale, softcap)
    scores = jnp.where(
        allowed[:, None, None], scores.astype(jnp.float32), MASKED
    )  # [B, G, X, T, J]
    if sinks is not None:
        sink = jnp.broadcast_to(
            sinks.astype(jnp.float32).reshape(1, g, h // g, 1, 1), (*scores.shape[:-1], 1)
        )
        probs = jax.nn.softmax(jnp.concatenate([scores, sink], -1), axis=-1)[..., :-1]
        probs = probs.astype(v.dtype)
    else:
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bgrts,bsge->btgre", probs, v, precision=HIGHEST)
    return out.reshape(b, t, h, e)


class _Online:
    """The online-softmax state of T queries (one block of Q rows in `blocked_attend`): running max,
    sum of exp, exp-weighted values."""

    @staticmethod
    def init(queries: tuple[int, ...], e: int):
        """No keys seen yet, for queries of shape `queries` (e.g. [B, G, X, T])."""
        m = jnp.full(queries, MASKED, jnp.float32)
        return m, jnp.zeros(queries, jnp.float32), jnp.zeros((*queries, e), jnp.float32)

    @staticmethod
    def update(state, scores: jax.Array, allowed: jax.Array, v: jax.Array, pv: str):
        """Folds one key block of Q keys in: scores [..., Q] over the state's query axes (e.g.
        [B, G, X, T, Q]), `allowed` broadcastable to them, `pv` the einsum of the weights and
        the block's values `v` that gives the state's value layout."""
        m, total, acc = state
        s = jnp.where(allowed, scores.astype(jnp.float32), MASKED)
        m_new = jnp.maximum(m, s.max(axis=-1))  # [B, G, X, T]
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[..., None])  # [B, G, X, T, Q]
        total = total * correction + p.sum(axis=-1)
        pv = jnp.einsum(
            pv, p.astype(v.dtype), v, precision=HIGHEST, preferred_element_type=jnp.float32
        )
        return m_new, total, acc * correction[..., None] + pv

    @staticmethod
    def finish(state, dtype) -> jax.Array:
        """[B, G, X, T, E] -> [B, T, G, X, E]; a query that saw nothing gets zeros (not NaN)."""
        _, total, acc = state
        out = acc / jnp.where(total > 0, total, 1.0)[..., None]
        return jnp.transpose(out, (0, 3, 1, 2, 4)).astype(dtype)


def online_init(queries: tuple[int, ...], e: int):
    """An online-softmax state that has seen no key yet (`blocked_attend`'s `init`)."""
    return _Online.init(queries, e)


def fold_sinks(state, sinks: FloatH):
    """The online-softmax state of queries [B, G, X, T] after one more key per head whose score is
    the head's sink and whose value is zero (gpt-oss): the sink joins the denominator only."""
    m, total, acc = state
    s = sinks.astype(jnp.float32).reshape(1, m.shape[1], m.shape[2], 1)
    m_new = jnp.maximum(m, s)
    correction = jnp.exp(m - m_new)
    return m_new, total * correction + jnp.exp(s - m_new), acc * correction[..., None]


def block_visibility(
    segment: Int["B T"],
    parent: Int["B T"],
    positions: Int["B T"],
    window: Int[""] | None,
    *,
    block: int,
) -> Bool["A A"]:
    """[A, A] (query block, key block): False only where no row has a visible (query, key) pair in
    the block pair.

    Conservative and cheap (per-block summaries, no [T, T] mask): a key block is visited when it
    is causal, the span of its segment ids meets the span of the query block's (segment, parent)
    ids, and its largest position is inside the window of the query block's smallest position.
    """
    b, t = segment.shape
    n = t // block
    seg = segment.reshape(b, n, block)
    par = parent.reshape(b, n, block)
    pos = positions.reshape(b, n, block)
    key_ok = seg != 0
    k_lo = jnp.where(key_ok, seg, _FAR).min(-1)  # [B, A]
    k_hi = jnp.where(key_ok, seg, 0).max(-1)
    q_ok = (seg != 0) | (par != 0)  # a query sees its own segment and its parent's (if non-zero)
    q_ids = jnp.where(seg == 0, par, jnp.where(par == 0, seg, jnp.minimum(seg, par)))
    q_lo = jnp.where(q_ok, q_ids, _FAR).min(-1)  # [B, A]
    q_hi = jnp.where(q_ok, jnp.maximum(seg, par), 0).max(-1)
    vis = (k_lo[:, None, :] <= q_hi[:, :, None]) & (q_lo[:, :, None] <= k_hi[:, None, :])
    if window is not None:
        k_pos = jnp.where(key_ok, pos, 0).max(-1)  # [B, A]
        q_pos = jnp.where(q_ok, pos, _FAR).min(-1)
        vis &= (q_pos[:, :, None] - k_pos[:, None, :]) < window
    causal = jnp.arange(n)[None, :] <= jnp.arange(n)[:, None]  # [A, A]: query block, key block
    return vis.any(axis=0) & causal


def blocked_attend(
    q: Float["B T H E"],
    k: Float["B T G E"],
    v: Float["B T G E"],
    segment: Int["B T"],
    parent: Int["B T"],
    positions: Int["B T"],
    *,
    window: Int[""] | None,
    scale: Float[""],
    softcap: float | None,
    block: int,
    init: tuple[jax.Array, jax.Array, jax.Array] | None = None,
) -> Float["B T H E"]:
    """`attend` under `packed_mask` (& `window_mask`), computed block by block (module docstring).

    A `lax.scan` over query blocks of `block` rows; for each, a `fori_loop` over the key blocks from
    the first to the last visible one, each behind a `lax.cond` on `block_visibility`. Scores, the
    soft-cap and the mask are the dense path's; the softmax is online in float32. T must be a
    multiple of `block` (else the row is padded with segment-0 tokens, which nobody sees).

    `init`: an online-softmax state of the T queries over keys seen before these ([B, G, X, T]
    max and sum, [B, G, X, T, E] values: `_Online`), which each query block continues from
    (`cache_attend`: a prefill's cached prefix, then the prompt's own keys block by block).

    This is the reference (`attention_backend.XlaAttention.packed`); another backend may compute
    the same output its own way (the CPU kernel: one custom call, float32 summation order aside).
    """
    b, t, h, e = q.shape
    g = k.shape[2]
    r = h // g
    pad = -t % block
    if pad:
        q, k, v, segment, parent, positions = (
            jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
            for x in (q, k, v, segment, parent, positions)
        )
        if init is not None:
            fill = _Online.init((b, g, r, pad), e)
            init = tuple(jnp.concatenate([a, f], axis=3) for a, f in zip(init, fill))
        out = blocked_attend(
            q, k, v, segment, parent, positions,
            window=window, scale=scale, softcap=softcap, block=block, init=init,
        )  # fmt: skip
        return out[:, :t]
    n = t // block
    if init is None:
        init = _Online.init((b, g, r, t), e)
    # per query block: [A, B, G, X, Q] max and sum, [A, B, G, X, Q, E] values
    m0, total0, acc0 = init
    starts = (
        m0.reshape(b, g, r, n, block).transpose(3, 0, 1, 2, 4),
        total0.reshape(b, g, r, n, block).transpose(3, 0, 1, 2, 4),
        acc0.reshape(b, g, r, n, block, e).transpose(3, 0, 1, 2, 4, 5),
    )
    flags = block_visibility(segment, parent, positions, window, block=block)  # [A, A]
    # Heads-major layouts once per call, so that no key block is transposed inside the loops.
    q_blocks = q.reshape(b, n, block, g, r, e).transpose(1, 0, 3, 4, 2, 5)  # [A, B, G, X, Q, E]
    k_t = k.transpose(0, 2, 1, 3)  # [B, G, T, E]
    v_t = v.transpose(0, 2, 1, 3)
    meta = jnp.stack([segment, parent, positions], axis=0).reshape(3, b, n, block)
    q_meta = meta.transpose(2, 0, 1, 3)  # [A, 3, B, Q]

    def query_block(_, xs):
        qi, qb, qm, row_flags, start_state = xs  # qb [B, G, X, Q, E], qm [3, B, Q], flags [A]
        seg_q, par_q, pos_q = qm[0][:, :, None], qm[1][:, :, None], qm[2][:, :, None]
        q_idx = (qi * block + jnp.arange(block, dtype=jnp.int32))[None, :, None]  # [1, Q, 1]

        def key_block(kj, state):
            def visit(state):
                start = kj * block
                kb = jax.lax.dynamic_slice_in_dim(k_t, start, block, axis=2)  # [B, G, Q, E]
                vb = jax.lax.dynamic_slice_in_dim(v_t, start, block, axis=2)
                km = jax.lax.dynamic_index_in_dim(meta, kj, axis=2, keepdims=False)  # [3, B, Q]
                seg_k, pos_k = km[0][:, None, :], km[2][:, None, :]  # [B, 1, Q]
                k_idx = (start + jnp.arange(block, dtype=jnp.int32))[None, None, :]
                allowed = (seg_k != 0) & (k_idx <= q_idx) & ((seg_k == seg_q) | (seg_k == par_q))
                if window is not None:
                    allowed &= (pos_q - pos_k) < window
                # `_scores` in the heads-major layout: scaled after the matmul, then soft-capped.
                s = jnp.einsum("bgrqe,bgke->bgrqk", qb, kb, precision=HIGHEST)
                s = _scaled(s, scale, softcap)
                return _Online.update(state, s, allowed[:, None, None], vb, "bgrqk,bgke->bgrqe")

            return jax.lax.cond(row_flags[kj], visit, lambda s: s, state)

        first = jnp.argmax(row_flags)  # 0 when nothing is visible: then the loop is empty
        last = n - jnp.argmax(row_flags[::-1])  # one past the last visible key block
        last = jnp.where(row_flags.any(), last, first)
        state = jax.lax.fori_loop(first, last, key_block, start_state)
        return None, _Online.finish(state, v.dtype)  # [B, Q, G, X, E]

    xs = (jnp.arange(n), q_blocks, q_meta, flags, starts)
    _, out = jax.lax.scan(query_block, None, xs)  # [A, B, Q, G, X, E]
    return out.transpose(1, 0, 2, 3, 4, 5).reshape(b, t, h, e)


def cache_attend(
    q: Float["B T H E"],
    k_cache: Float["L B G E C"],
    v_cache: Float["L B G C E"],
    layer: Int[""],
    slot_valid: Bool["B C"],
    slot_positions: Int["B C"],
    q_positions: Int["B T"],
    index: Int[""] | IntB,
    k_new: Float["B T G E"],
    v_new: Float["B T G E"],
    *,
    window: Int[""] | None,
    scale: Float[""],
    softcap: float | None,
    block: int,
    new_block: int = 0,
    new_valid: Bool["B T"] | None = None,
    backend: Any = None,
    sinks: FloatH | None = None,
) -> Float["B T H E"]:
    """Attention of T queries at slots [index, index + T): over layer `layer` of a stacked cache
    holding the slots before `index`, and over this call's own keys `k_new` / `v_new`, which the
    caller writes into the cache afterwards (`decoder.forward_cached`: one write per call, after
    the layer scan, so the cache is read in the scan but never carried through it).

    `index` is one slot for every row ([]) or each row's own ([B], continuous batching: rows that
    started at different times). Walks cache blocks of `block` slots with an online softmax and
    stops after the block holding slot max(index) - 1: a call reads the written prefix only, never
    the empty tail; a row's slots at or past its own index are masked (a block wholly masked for a
    row leaves its online-softmax state bit for bit unchanged). The last block is slid back to end
    at C when C is not a multiple of `block` (its already-seen slots masked), so no block reads past
    the cache. Then the T new keys: query t sees new key u iff u <= t and slot index + u is valid
    (`slot_valid`, already holding this call's entries), within the window on positions: densely
    ([B, G, X, T, T] scores) when `new_block` is 0, else block by block from the cache's online
    state (`blocked_attend` with `init`; a long prefill, where the dense scores cost 2.4x the whole
    forward pass on CPU at T = 1,024).

    `backend` (`jaxeval.models.attention_backend`; None: the reference) may compute a one-token
    step's state over the cache its own way (`cache_state`: the CPU kernel reads each row's written
    slots in one pass) and attends over a long prefill's own keys (`packed`).

    A cache of one row (`k_cache` [L, 1, G, E, C]: a shared prefix, `decoder.forward_new`) is read
    by all B query rows; C = 0 is no cache. `new_valid` gives the new keys' validity directly
    (default: `slot_valid` at their slots). `sinks` [H] (gpt-oss): `fold_sinks`.
    """
    b, t, h, e = q.shape
    bc, g, c = k_cache.shape[1], k_cache.shape[2], k_cache.shape[4]
    r = h // g
    block = min(block, c)
    dtype = q.dtype
    qb = q.reshape(b, t, g, r, e)  # [B, T, G, X, E]
    # The X query heads of a kv head and the T queries as one axis of X*T rows, so that each block
    # is two plain matmuls per (row, kv head): [X*T, E] . [E, Q] and [X*T, Q] . [Q, E].
    qm = qb.transpose(0, 2, 3, 1, 4).reshape(b, g, r * t, e)  # [B, G, X*T, E]
    index = jnp.asarray(index, jnp.int32)
    row_index = jnp.broadcast_to(index, (b,))  # [B]
    zero = jnp.zeros((), jnp.int32)

    def key_block(j, state):
        nominal = j * block
        start = jnp.minimum(nominal, c - block)
        at = (layer, zero, zero, zero, start)
        kb = jax.lax.dynamic_slice(k_cache, at, (1, bc, g, e, block))[0]  # [B, G, E, Q]
        at = (layer, zero, zero, start, zero)
        vb = jax.lax.dynamic_slice(v_cache, at, (1, bc, g, block, e))[0]  # [B, G, Q, E]
        kb, vb = kb.astype(dtype), vb.astype(dtype)
        if bc != b:  # one (prefix) row for every query row
            kb = jnp.broadcast_to(kb, (b, *kb.shape[1:]))
            vb = jnp.broadcast_to(vb, (b, *vb.shape[1:]))
        slots = start + jnp.arange(block, dtype=jnp.int32)  # [Q]
        ok = jax.lax.dynamic_slice_in_dim(slot_valid, start, block, axis=1)  # [B, Q]
        before = (slots[None, :] < row_index[:, None]) & (slots >= nominal)[None, :]  # [B, Q]
        allowed = jnp.broadcast_to((ok & before)[:, None, :], (b, t, block))
        if window is not None:
            k_pos = jax.lax.dynamic_slice_in_dim(slot_positions, start, block, axis=1)
            allowed &= (q_positions[:, :, None] - k_pos[:, None, :]) < window
        allowed = jnp.broadcast_to(allowed[:, None], (b, r, t, block)).reshape(b, 1, r * t, block)
        scores = jnp.einsum("bgme,bgeq->bgmq", qm, kb, precision=HIGHEST)  # [B, G, X*T, Q]
        scores = _scaled(scores, scale, softcap)
        return _Online.update(state, scores, allowed, vb, "bgmq,bgqe->bgme")

    state = _Online.init((b, g, r * t), e)  # [B, G, X*T]: the rows-merged layout
    fused = None
    if backend is not None and c and t == 1 and bc == b:  # a decode step: the backend's own pass?
        fused = backend.cache_state(
            qm, k_cache, v_cache, layer, row_index, slot_valid, slot_positions,
            q_positions[:, 0], window, scale, softcap,
        )  # fmt: skip
    if fused is not None:
        state = fused
    elif c:
        n_blocks = (jnp.max(row_index) + block - 1) // block  # blocks holding [0, index)
        state = jax.lax.fori_loop(0, n_blocks, key_block, state)
    m, total, acc = state  # back to [B, G, X, T] for the call's own keys
    state = (m.reshape(b, g, r, t), total.reshape(b, g, r, t), acc.reshape(b, g, r, t, e))
    if sinks is not None:
        state = fold_sinks(state, sinks)
    # this call's own keys, as the cache would hold them (its dtype), causal among themselves
    k_new = k_new.astype(k_cache.dtype).astype(dtype)
    v_new = v_new.astype(v_cache.dtype).astype(dtype)
    if new_valid is None:
        new_slots = jnp.minimum(row_index[:, None] + jnp.arange(t, dtype=jnp.int32), c - 1)
        new_ok = jnp.take_along_axis(slot_valid, new_slots, axis=1)  # [B, T]
    else:
        new_ok = new_valid
    if new_block:
        segment = new_ok.astype(jnp.int32)  # valid new keys: one segment, causal
        packed = blocked_attend if backend is None else backend.packed
        return packed(
            q, k_new, v_new, segment, jnp.zeros_like(segment), q_positions,
            window=window, scale=scale, softcap=softcap, block=new_block, init=state,
        )  # fmt: skip
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]  # [T, T]: query, key
    allowed = new_ok[:, None, :] & causal[None]
    if window is not None:
        allowed &= (q_positions[:, :, None] - q_positions[:, None, :]) < window
    scores = _scores(qb, k_new, scale, softcap)  # [B, G, X, T, T]
    state = _Online.update(state, scores, allowed[:, None, None], v_new, "bgrqk,bkge->bgrqe")
    return _Online.finish(state, dtype).reshape(b, t, h, e)


def _norm_heads(p: dict[str, jax.Array], x: Float["B T H E"], *, kind: str, eps: float):
    b, t, h, e = x.shape
    flat = {name: w.reshape(h * e) for name, w in p.items()}
    return norm(flat, x.reshape(b, t, h * e), kind=kind, eps=eps).reshape(b, t, h, e)


def attention_block(
    spec,
    p: dict[str, jax.Array],
    x: Float["B T D"],
    *,
    cos: Float["B T E'"] | None,
    sin: Float["B T E'"] | None,
    attend_fn: AttendFn,
    latent: bool = False,
) -> tuple[Float["B T D"], Any]:
    """Projections, optional q/k norms, rotary, `attend_fn(q, k, v)`, output projection.

    `attend_fn` chooses the attention (dense, blocked, or a cache write then `cache_attend`) and
    returns (out [B, T, H, E], aux); this returns (y [B, T, D], aux). `latent`: MLA in its latent
    form (the KV cache's: `mla.py`), else expanded; other models ignore it.
    """
    if spec.mla is not None:  # DeepSeek: latent projections, rope part first (`mla.py`)
        qkv, output = (mla_latent_qkv, mla_latent_output) if latent else (mla_qkv, mla_output)
        q, k, v = qkv(spec, p, x)
        if cos is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out, aux = attend_fn(q, k, v)
        return output(spec, p, out), aux
    q = dense(x, p["q"], "btd,dhe->bthe", p.get("q_bias"))  # [B, T, H, E]
    k = dense(x, p["k"], "btd,dge->btge", p.get("k_bias"))  # [B, T, G, E]
    v = dense(x, p["v"], "btd,dge->btge", p.get("v_bias"))  # [B, T, G, E]
    if spec.qk_norm in ("head", "per_head"):  # over E; one scale [E], or one per head [H, E]
        q = norm(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = norm(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    elif spec.qk_norm == "heads":  # over all H*E features of the projection
        q = _norm_heads(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = _norm_heads(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    if cos is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    out, aux = attend_fn(q, k, v)
    return dense(out, p["o"], "bthe,hed->btd", p.get("o_bias")), aux
