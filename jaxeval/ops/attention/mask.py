"""The attention rule every path computes: which keys each query sees, as one `Mask` pytree.

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

**Blocks.** A blocked path walks query blocks of Q rows and, for each, only the key blocks that some
row can see (`block_visibility`). Rows of T = 8 in blocks of Q = 2, so A = 4 blocks per row (a: a
3-token request, b: 2 tokens, c: a context with one child x; `#` = visited block, `.` = skipped):

    segment   a a a b b c c x        key block  0 1 2 3        query block 2 (tokens 4, 5 = b, c)
    parent    0 0 0 0 0 0 0 c        query 0    # . . .        sees key block 1 (token 3 = b) and
                                           1    # # . .        block 2; block 0 (a only) is skipped
                                           2    . # # .
                                           3    . . # #

The reference (`jaxeval.models.attention`) and every device kernel (`jaxeval.ops.attention`) read
the rule from here. Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxeval.shapes import Bool, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters

MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: fully-masked rows stay NaN-free
NO_WINDOW = 2**30  # a window size that never masks anything
_FAR = 2**29  # a position sentinel: far beyond any real position, and FAR - 0 < NO_WINDOW

# An online-softmax state of queries [B, G, X, T] (float32): the running max m and sum of exp
# `total` [B, G, X, T], the exp-weighted values `acc` [B, G, X, T, E]; the output is acc / total. A
# query that has seen no key: m = MASKED, total = 0, acc = 0.
State = tuple[jax.Array, jax.Array, jax.Array]


class Mask(NamedTuple):
    """A packed row's mask (the rule above), one pytree for every packed-attention call.

    `window` is None (no window term: the program has none) or a traced int32 scalar (a layer's
    window, scanned; `NO_WINDOW` keeps every key).
    """

    segment: Int["B T"]  # 1.. per request or context within a row; 0 = padding, seen by nobody
    parent: Int["B T"]  # the segment a child also sees (its shared context); 0 = none
    positions: Int["B T"]  # position ids; a child continues its parent's
    window: Int[""] | None = None  # sliding window on positions


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


def block_visibility(mask: Mask, *, block: int) -> Bool["A A"]:
    """[A, A] (query block, key block): False only where no row has a visible (query, key) pair in
    the block pair (the module docstring's drawing).

    Conservative and cheap (per-block summaries, no [T, T] mask): a key block is visited when it
    is causal, the span of its segment ids meets the span of the query block's (segment, parent)
    ids, and its largest position is inside the window of the query block's smallest position.
    """
    b, t = mask.segment.shape
    n = t // block
    seg = mask.segment.reshape(b, n, block)
    par = mask.parent.reshape(b, n, block)
    pos = mask.positions.reshape(b, n, block)
    key_ok = seg != 0
    k_lo = jnp.where(key_ok, seg, _FAR).min(-1)  # [B, A]
    k_hi = jnp.where(key_ok, seg, 0).max(-1)
    q_ok = (seg != 0) | (par != 0)  # a query sees its own segment and its parent's (if non-zero)
    q_ids = jnp.where(seg == 0, par, jnp.where(par == 0, seg, jnp.minimum(seg, par)))
    q_lo = jnp.where(q_ok, q_ids, _FAR).min(-1)  # [B, A]
    q_hi = jnp.where(q_ok, jnp.maximum(seg, par), 0).max(-1)
    vis = (k_lo[:, None, :] <= q_hi[:, :, None]) & (q_lo[:, :, None] <= k_hi[:, None, :])
    if mask.window is not None:
        k_pos = jnp.where(key_ok, pos, 0).max(-1)  # [B, A]
        q_pos = jnp.where(q_ok, pos, _FAR).min(-1)
        vis &= (q_pos[:, :, None] - k_pos[:, None, :]) < mask.window
    causal = jnp.arange(n)[None, :] <= jnp.arange(n)[:, None]  # [A, A]: query block, key block
    return vis.any(axis=0) & causal
