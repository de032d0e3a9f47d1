"""Grouped-query attention, the reference: dense, blocked (flash-style) and KV-cache paths.

The rule (which keys a query sees) is `Mask`'s (`jaxeval.ops.attention.mask`, drawn there): packed
rows by segment, parent and causality, KV-cache slots by validity and index, both optionally within
a sliding window on positions. This module computes it three ways, and knows no backend: a backend
(`AttentionBackend`) calls these functions where its own kernel does not apply, and the decoder
composes them with the backend's methods.

**Three ways to attend, one rule.** `attend` builds the full [B, H, T, J] float32 scores (short
rows). `blocked_attend` walks query blocks of Q rows and, for each, only the key blocks (also Q
rows) that some row can see (`block_visibility`), with an online softmax in float32, so its memory
is O(B H Q Q) and it skips the masked upper triangle, other requests' segments and keys outside
every window. `cache_state` walks cache blocks up to the last written slot (`index + T`), never
reading the unwritten tail; `cache_attend` continues from that state over the call's own keys:

    cache_attend = cache_state (the cache's slots before index)          [B, G, X, T] state
                   -> fold_sinks (gpt-oss), new_keys (their Mask: one causal segment)
                   -> blocked_attend(init=state) on a long prefill, else attend_new_keys (dense)

Fully masked queries (padding) stay finite: the dense path gives them a uniform softmax, the blocked
paths the mean of the values they visited or zero; their outputs are never read.

Dimension names: `jaxeval.shapes`. The keys J are the row's own T tokens in packed rows and the C
cache slots with a KV cache; query head h reads key/value head h // X (X = H / G).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxeval.models.contract import KVCache
from jaxeval.models.layers import HIGHEST
from jaxeval.ops.attention.mask import MASKED, Mask, State, block_visibility
from jaxeval.shapes import Bool, Float, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters
IntAq = Int["Aq"]
FloatH = Float["H"]


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
    sum of exp, exp-weighted values (`State`)."""

    @staticmethod
    def init(queries: tuple[int, ...], e: int) -> State:
        """No keys seen yet, for queries of shape `queries` (e.g. [B, G, X, T])."""
        m = jnp.full(queries, MASKED, jnp.float32)
        return m, jnp.zeros(queries, jnp.float32), jnp.zeros((*queries, e), jnp.float32)

    @staticmethod
    def update(state, scores: jax.Array, allowed: jax.Array, v: jax.Array, pv: str) -> State:
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


def online_init(queries: tuple[int, ...], e: int) -> State:
    """An online-softmax state that has seen no key yet (`blocked_attend`'s `init`)."""
    return _Online.init(queries, e)


def fold_sinks(state: State, sinks: FloatH) -> State:
    """The online-softmax state of queries [B, G, X, T] after one more key per head whose score is
    the head's sink and whose value is zero (gpt-oss): the sink joins the denominator only."""
    m, total, acc = state
    s = sinks.astype(jnp.float32).reshape(1, m.shape[1], m.shape[2], 1)
    m_new = jnp.maximum(m, s)
    correction = jnp.exp(m - m_new)
    return m_new, total * correction + jnp.exp(s - m_new), acc * correction[..., None]


def blocked_attend(
    q: Float["B T H E"],
    k: Float["B T G E"],
    v: Float["B T G E"],
    mask: Mask,
    *,
    scale: Float[""],
    softcap: float | None,
    block: int,
    init: State | None = None,
    q_blocks: IntAq | None = None,
) -> Float["B T H E"]:
    """`attend` under `packed_mask` (& `window_mask`), computed block by block (module docstring).

    A `lax.scan` over query blocks of `block` rows; for each, a `fori_loop` over the key blocks from
    the first to the last visible one, each behind a `lax.cond` on `block_visibility`. Scores, the
    soft-cap and the mask are the dense path's; the softmax is online in float32. T must be a
    multiple of `block` (else the row is padded with segment-0 tokens, which nobody sees).

    `init`: an online-softmax state of the T queries over keys seen before these ([B, G, X, T]
    max and sum, [B, G, X, T, E] values: `State`), which each query block continues from
    (`cache_attend`: a prefill's cached prefix, then the prompt's own keys block by block).

    `q_blocks`: q holds only these query blocks of the row (Aq block indices, int32, in q's order;
    q is [B, Aq*Q, H, E]) while k, v and `mask` hold the whole row, a multiple of `block`
    (sequence parallelism, `attention.sequence`: each device its own query blocks against every
    key). None: q is the whole row.

    This is the reference (`XlaAttention.packed`); another backend may compute the same output its
    own way (the CPU kernel: one custom call, float32 summation order aside).
    """
    b, tq, h, e = q.shape
    g = k.shape[2]
    r = h // g
    t = k.shape[1]
    pad = -t % block
    if q_blocks is not None and (pad or tq % block):
        raise ValueError(f"query blocks need rows of whole blocks of {block}: {tq}, {t} tokens")
    if pad:

        def padded(x):
            return jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))

        q, k, v = padded(q), padded(k), padded(v)
        mask = Mask(padded(mask.segment), padded(mask.parent), padded(mask.positions), mask.window)
        if init is not None:
            fill = _Online.init((b, g, r, pad), e)
            init = tuple(jnp.concatenate([a, f], axis=3) for a, f in zip(init, fill))
        out = blocked_attend(q, k, v, mask, scale=scale, softcap=softcap, block=block, init=init)
        return out[:, :t]
    n = t // block
    nq = tq // block
    ids = jnp.arange(n, dtype=jnp.int32) if q_blocks is None else jnp.asarray(q_blocks, jnp.int32)
    segment, parent, positions, window = mask
    if init is None:
        init = _Online.init((b, g, r, tq), e)
    # per query block: [Aq, B, G, X, Q] max and sum, [Aq, B, G, X, Q, E] values
    m0, total0, acc0 = init
    starts = (
        m0.reshape(b, g, r, nq, block).transpose(3, 0, 1, 2, 4),
        total0.reshape(b, g, r, nq, block).transpose(3, 0, 1, 2, 4),
        acc0.reshape(b, g, r, nq, block, e).transpose(3, 0, 1, 2, 4, 5),
    )
    flags = block_visibility(mask, block=block)[ids]  # [Aq, A]
    # Heads-major layouts once per call, so that no key block is transposed inside the loops.
    q_heads = q.reshape(b, nq, block, g, r, e).transpose(1, 0, 3, 4, 2, 5)  # [Aq, B, G, X, Q, E]
    k_t = k.transpose(0, 2, 1, 3)  # [B, G, T, E]
    v_t = v.transpose(0, 2, 1, 3)
    meta = jnp.stack([segment, parent, positions], axis=0).reshape(3, b, n, block)
    q_meta = meta.transpose(2, 0, 1, 3)[ids]  # [Aq, 3, B, Q]

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

    xs = (ids, q_heads, q_meta, flags, starts)
    _, out = jax.lax.scan(query_block, None, xs)  # [Aq, B, Q, G, X, E]
    return out.transpose(1, 0, 2, 3, 4, 5).reshape(b, tq, h, e)


def merged_queries(q: Float["B T H E"], g: int) -> Float["B G X*T E"]:
    """The X query heads of a kv head and the T queries as one axis of X*T rows, so that each
    cache block is two plain matmuls per (row, kv head): [X*T, E] . [E, Q] and [X*T, Q] . [Q, E]
    (the layout of `cache_state`'s loop and of the decode kernels)."""
    b, t, h, e = q.shape
    qb = q.reshape(b, t, g, h // g, e)  # [B, T, G, X, E]
    return qb.transpose(0, 2, 3, 1, 4).reshape(b, g, (h // g) * t, e)


def split_state(state: State, t: int) -> State:
    """A state of the rows-merged queries [B, G, X*T] back to [B, G, X, T] (`merged_queries`)."""
    m, total, acc = state
    b, g, xt = m.shape
    x = xt // t
    return m.reshape(b, g, x, t), total.reshape(b, g, x, t), acc.reshape(b, g, x, t, -1)


def cache_state(
    q: Float["B T H E"],
    cache: KVCache,
    layer: Int[""],
    q_positions: Int["B T"],
    index: Int[""] | IntB,
    *,
    window: Int[""] | None,
    scale: Float[""],
    softcap: float | None,
    block: int,
) -> State:
    """The online-softmax state ([B, G, X, T]) of T queries at slots [index, index + T) over layer
    `layer` of a stacked cache (`KVCache`: k [L, B, G, E, C], v [L, B, G, C, E], valid and
    positions [B, C]) holding the slots before `index` (`XlaAttention.cache_state`).

    `index` is one slot for every row ([]) or each row's own ([B], continuous batching: rows that
    started at different times). Walks cache blocks of `block` slots with an online softmax and
    stops after the block holding slot max(index) - 1: a call reads the written prefix only, never
    the empty tail; a row's slots at or past its own index are masked (a block wholly masked for a
    row leaves its online-softmax state bit for bit unchanged). The last block is slid back to end
    at C when C is not a multiple of `block` (its already-seen slots masked), so no block reads past
    the cache. A cache of one row (`cache.k` [L, 1, G, E, C]: a shared prefix,
    `decoder.forward_new`) is read by all B query rows; C = 0 is no cache (no key seen).
    """
    k_cache, v_cache, slot_valid, slot_positions = cache
    b, t, h, e = q.shape
    bc, g, c = k_cache.shape[1], k_cache.shape[2], k_cache.shape[4]
    r = h // g
    block = min(block, c)
    dtype = q.dtype
    qm = merged_queries(q, g)  # [B, G, X*T, E]
    row_index = jnp.broadcast_to(jnp.asarray(index, jnp.int32), (b,))  # [B]
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
    if c:
        n_blocks = (jnp.max(row_index) + block - 1) // block  # blocks holding [0, index)
        state = jax.lax.fori_loop(0, n_blocks, key_block, state)
    return split_state(state, t)


def new_keys(
    q: Float["B T H E"],
    k_new: Float["B T G E"],
    v_new: Float["B T G E"],
    cache: KVCache,
    q_positions: Int["B T"],
    index: Int[""] | IntB,
    *,
    window: Int[""] | None,
    new_valid: Bool["B T"] | None = None,
) -> tuple[Float["B T G E"], Float["B T G E"], Mask]:
    """A cached call's own keys and values as the cache would hold them (its dtype, then q's), and
    their `Mask`: the valid new keys (`cache.valid` at slots index + t, already holding this
    call's entries, or `new_valid` when given) as one segment, causal among themselves, within the
    window on `q_positions`."""
    b, t = q.shape[:2]
    c = cache.k.shape[4]
    dtype = q.dtype
    k_new = k_new.astype(cache.k.dtype).astype(dtype)
    v_new = v_new.astype(cache.v.dtype).astype(dtype)
    if new_valid is None:
        row_index = jnp.broadcast_to(jnp.asarray(index, jnp.int32), (b,))  # [B]
        new_slots = jnp.minimum(row_index[:, None] + jnp.arange(t, dtype=jnp.int32), c - 1)
        new_valid = jnp.take_along_axis(cache.valid, new_slots, axis=1)  # [B, T]
    segment = new_valid.astype(jnp.int32)  # valid new keys: one segment, causal
    return k_new, v_new, Mask(segment, jnp.zeros_like(segment), q_positions, window)


def attend_new_keys(
    q: Float["B T H E"],
    k_new: Float["B T G E"],
    v_new: Float["B T G E"],
    mask: Mask,
    state: State,
    *,
    scale: Float[""],
    softcap: float | None,
) -> Float["B T H E"]:
    """The T new keys (`new_keys`) folded densely ([B, G, X, T, T] scores) into `state`, finished:
    query t sees new key u iff u <= t, key u is valid (`mask.segment` != 0) and inside the window."""
    b, t, h, e = q.shape
    g = k_new.shape[2]
    qb = q.reshape(b, t, g, h // g, e)  # [B, T, G, X, E]
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]  # [T, T]: query, key
    allowed = (mask.segment != 0)[:, None, :] & causal[None]
    if mask.window is not None:
        allowed &= (mask.positions[:, :, None] - mask.positions[:, None, :]) < mask.window
    scores = _scores(qb, k_new, scale, softcap)  # [B, G, X, T, T]
    state = _Online.update(state, scores, allowed[:, None, None], v_new, "bgrqk,bkge->bgrqe")
    return _Online.finish(state, q.dtype).reshape(b, t, h, e)


def cache_attend(
    q: Float["B T H E"],
    cache: KVCache,
    layer: Int[""],
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
    sinks: FloatH | None = None,
) -> Float["B T H E"]:
    """Attention of T queries at slots [index, index + T): over the cache's slots before `index`
    (`cache_state`, blocks of `block`), then over this call's own keys `k_new` / `v_new`, which
    the caller writes into the cache afterwards (`decoder.forward_cached`: one write per call, after
    the layer scan, so the cache is read in the scan but never carried through it).

    The new keys (`new_keys`) go densely (`attend_new_keys`) when `new_block` is 0, else block by
    block from the cache's online state (`blocked_attend` with `init`; a long prefill, where the
    dense scores cost 2.4x the whole forward pass on CPU at T = 1,024). `sinks` [H] (gpt-oss):
    `fold_sinks` before the new keys. The decoder composes the same steps with its backend's
    `cache_state` and `packed`; this is what every such composition equals.
    """
    state = cache_state(
        q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap,
        block=block,
    )  # fmt: skip
    if sinks is not None:
        state = fold_sinks(state, sinks)
    k_new, v_new, mask = new_keys(
        q, k_new, v_new, cache, q_positions, index, window=window, new_valid=new_valid
    )
    if new_block:
        return blocked_attend(
            q, k_new, v_new, mask, scale=scale, softcap=softcap, block=new_block, init=state
        )
    return attend_new_keys(q, k_new, v_new, mask, state, scale=scale, softcap=softcap)


def write_slots(
    cache: KVCache,
    k: Float["L B T G E"],
    v: Float["L B T G E"],
    index: Int[""] | IntB,
) -> KVCache:
    """The cache with this call's keys and values at slots [index, index + T) of k and v
    (`index`: one slot for all rows, a `dynamic_update_slice`; or one per row, a scatter dropping
    slots past C); its valid and positions as given (the caller's, already holding this call's):

        index [5, 2]:  row 0 writes slot 5 (then 6, ...), row 1 slot 2 (then 3, ...)

    k and v already hold the cache's dtype."""
    k_cache, v_cache = cache.k, cache.v
    index = jnp.asarray(index, jnp.int32)
    if index.ndim == 1:  # k_cache[:, r, :, :, index[r] + t] <- k[:, r, t]: indexed axes first
        b, t = k.shape[1], k.shape[2]
        rows = jnp.arange(b, dtype=jnp.int32)[:, None]  # [B, 1]
        slots = index[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]  # [B, T]
        k_rows = jnp.transpose(k, (1, 2, 0, 3, 4))  # [B, T, L, G, E]
        v_rows = jnp.transpose(v, (1, 2, 0, 3, 4))
        k_cache = k_cache.at[:, rows, :, :, slots].set(k_rows, mode="drop")
        return cache._replace(k=k_cache, v=v_cache.at[:, rows, :, slots].set(v_rows, mode="drop"))
    zero = jnp.zeros((), jnp.int32)
    k_t = jnp.transpose(k, (0, 1, 3, 4, 2))  # [L, B, G, E, T]
    v_t = jnp.transpose(v, (0, 1, 3, 2, 4))  # [L, B, G, T, E]
    k_cache = jax.lax.dynamic_update_slice(k_cache, k_t, (zero, zero, zero, zero, index))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v_t, (zero, zero, zero, index, zero))
    return cache._replace(k=k_cache, v=v_cache)
