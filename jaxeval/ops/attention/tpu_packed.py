"""Packed-row flash attention as one Pallas TPU kernel: the reference's rule and numbers
(`jaxeval.models.attention.blocked_attend`).

Query i sees key j iff `segment[j] != 0 and j <= i and (segment[j] == segment[i] or segment[j] ==
parent[i])`, plus `positions[i] - positions[j] < window` on sliding-window layers (the `Mask`'s rule:
`jaxeval.ops.attention.mask`). Scores are q.k in float32, times `scale`, soft-capped, masked; the softmax is
online in float32 and the weights are cast to the values' dtype before the second matmul.

**Grid.** (row b, kv head g, query block i, key step j), j innermost. One program holds the X query
heads of kv head g for Q queries as one [X*Q, E] matrix, so each key block is read once per kv head
and each step is two matmuls: [X*Q, E] . [E, Q] and [X*Q, Q] . [Q, E].

**Block skipping.** Before the kernel, XLA summarises each row's blocks (`block_visibility` on the
row alone, so a row's skips do not depend on its neighbours) into a [B, A, A] visibility and, per
query block, the first and last visible key block. Step j reads key block clamp(j, first, last):
steps outside the range repeat a block index, so Pallas fetches nothing new, and a step computes only
when its block is visible. Two rows of T = 8 in blocks of Q = 2 (A = 4; a: a 3-token request, b: 2
tokens, c: a context with one child x; `#` visible, `.` skipped):

    row 0   segment   a a a b b c c x     key block  0 1 2 3    first last   blocks read, j = 0..3
            parent    0 0 0 0 0 0 0 c     query 0    # . . .      0     0    0 0 0 0
                                                1    # # . .      0     1    0 1 1 1
                                                2    . # # .      1     2    1 1 2 2
                                                3    . . # #      2     3    2 2 2 3
    row 1   segment   a a a a a a a a     query i    # up to i    0     i    (causal only)

Row 0's query block 2 (tokens 4, 5 = b, c) computes at steps 1 and 2 only: block 0 holds request a
alone. Blocks are 128-lane multiples on a TPU (Q = 128 by default); T is padded to a multiple of Q
with segment-0 tokens, which nobody sees.

**Layouts.** q as [B, G, X, T, E] (a block is X*Q rows), k and v as [B, G, T, E]; the query side's
segment, parent and position in lanes 0, 1, 2 of a [B, T, 128] int32 array (a column per query), the
key side's segment and position in sublanes 0, 1 of a [B, 8, T] int32 array (a row per key). The
scale and window are scalar-prefetch operands (runtime values: layers are scanned), as are the
visibility (bit-packed, 32 key blocks a word) and the first/last tables the index maps read.

**State.** `packed_state` returns the reference's online-softmax state (`mask.State`) over the row's own keys (out = acc /
total, both relative to the running max m; a query that saw nothing: m = MASKED, total 0, acc 0).
`packed_attention` merges an earlier state (`init`, e.g. a prefill's cached prefix) by the
log-sum-exp rule and finishes; without `init` the kernel finishes and writes v.dtype itself.

Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxeval.errors import JaxevalError
from jaxeval.ops.attention.mask import MASKED, NO_WINDOW, Mask, State, block_visibility
from jaxeval.shapes import Bool, Float, Int

IntAq = Int["Aq"]  # a name in a string alone reads as an undefined name to linters

_LANES = 128  # TPU vector lanes: a key block is a multiple of this
_SUBLANES = 8
_WORD = 32  # key blocks per visibility word
# The running max starts above MASKED, so a masked score's weight exp(MASKED - m) is 0 even before
# a query's first visible key: a query that sees nothing keeps total 0 and gets zeros.
_START = MASKED / 2
_NT = (((1,), (1,)), ((), ()))  # a . b^T
_NN = (((1,), (0,)), ((), ()))  # a . b

# Query rows (X query heads x Q queries) one program holds: its scores [X*Q, Q] and float32
# state stay within the TPU's default scoped VMEM (16 MiB on a v5e). Compiled for a v5e-32,
# Llama-3-70B's X = 8 heads per kv head in blocks of 512 (4,096 rows) ran out of VMEM.
MAX_QUERY_ROWS = 2048


def fit_block(block: int, heads_per_kv: int) -> int:
    """The largest block <= `block`, a multiple of 128, with heads_per_kv x block <= 2,048 query
    rows (`MAX_QUERY_ROWS`); at least 128."""
    q = _LANES
    while q * 2 <= block and heads_per_kv * q * 2 <= MAX_QUERY_ROWS:
        q *= 2
    return q if block >= _LANES else block


def row_visibility(mask: Mask, *, block: int) -> Bool["B A A"]:
    """(row, query block, key block): False where the row has no visible pair in the block pair."""

    def one(s, p, x):
        return block_visibility(Mask(s[None], p[None], x[None], mask.window), block=block)

    return jax.vmap(one)(mask.segment, mask.parent, mask.positions)


def visit_range(visible: Bool["B Aq A"]) -> tuple[Int["B Aq"], Int["B Aq"]]:
    """The first and last visible key block of each query block ((0, 0) when none is)."""
    n = visible.shape[-1]
    seen = visible.any(-1)
    first = jnp.where(seen, jnp.argmax(visible, -1), 0).astype(jnp.int32)
    last = jnp.where(seen, n - 1 - jnp.argmax(visible[..., ::-1], -1), 0).astype(jnp.int32)
    return first, last


def key_block(step, first, last):
    """The key block that key step `step` reads: clamped into [first, last], so that the steps
    before and after the visible range repeat their neighbour's block (no new fetch)."""
    return jnp.minimum(jnp.maximum(step, first), last)


def pack_visibility(visible: Bool["B Aq A"]) -> jax.Array:
    """int32 words: bit j % 32 of word [b, i, j // 32] is visible[b, i, j]; flattened, B*Aq*(A/32
    rounded up) words, because scalar memory is small (1 MiB on a v5e; 64 rows of 8,192 tokens in
    blocks of 128 take 32 KiB, unpacked 1 MiB)."""
    b, rows, n = visible.shape
    words = -(-n // _WORD)
    bits = jnp.pad(visible, ((0, 0), (0, 0), (0, words * _WORD - n))).astype(jnp.uint32)
    bits = bits.reshape(b, rows, words, _WORD) << jnp.arange(_WORD, dtype=jnp.uint32)
    return jax.lax.bitcast_convert_type(bits.sum(-1, dtype=jnp.uint32), jnp.int32).reshape(-1)


def _lanes(x: jax.Array, n: int) -> jax.Array:
    """A lane-replicated [rows, 128] column widened or narrowed to n lanes (n = 192, MLA's head
    dim: tiled to 256, then cut)."""
    if n <= _LANES:
        return x[:, :n]
    return jnp.tile(x, (1, -(-n // _LANES)))[:, :n]


def _kernel(scale_ref, window_ref, visible_ref, first_ref, last_ref, ids_ref,  # scalar prefetch
            q_ref, k_ref, v_ref, q_meta_ref, k_meta_ref,  # blocks
            *refs, softcap, windowed, finish, n_rows, n_blocks):  # fmt: skip
    """One (row, kv head, query block, key step) of the grid; `refs`: outputs, then the m, total,
    acc scratch ([X*Q, 128] lane-replicated, [X*Q, 128], [X*Q, E] float32). Query block qi of
    the grid is block `ids_ref[qi]` of the row (all blocks, or a device's share); `n_rows` query
    blocks, `n_blocks` key blocks."""
    outs, (m_ref, l_ref, acc_ref) = refs[:-3], refs[-3:]
    b, qi, kj = pl.program_id(0), pl.program_id(2), pl.program_id(3)
    x, q, e = q_ref.shape
    kq = k_ref.shape[0]
    rows = x * q

    @pl.when(kj == 0)
    def _start():
        m_ref[...] = jnp.full(m_ref.shape, _START, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    # (no floor division or modulo: their sign handling does not lower; kj >= 0)
    word = visible_ref[(b * n_rows + qi) * pl.cdiv(n_blocks, _WORD) + jax.lax.div(kj, _WORD)]

    @pl.when(((word >> jax.lax.rem(kj, _WORD)) & 1) == 1)
    def _visit():
        exact = jax.lax.Precision.HIGHEST if q_ref.dtype == jnp.float32 else None
        qb = q_ref[...].reshape(rows, e)  # [X*Q, E]
        s = jax.lax.dot_general(
            qb, k_ref[...], _NT, precision=exact, preferred_element_type=jnp.float32
        )  # [X*Q, Q]
        s = s * scale_ref[0]
        if softcap is not None:
            s = jnp.tanh(s / softcap) * softcap
        q_meta = q_meta_ref[...]  # [Q, 128]: lanes 0, 1, 2 = segment, parent, position
        seg_q, par_q = q_meta[:, 0:1], q_meta[:, 1:2]  # [Q, 1]
        seg_k = k_meta_ref[0:1, :]  # [1, Q]
        q_idx = ids_ref[qi] * q + jax.lax.broadcasted_iota(jnp.int32, (q, kq), 0)
        k_idx = kj * kq + jax.lax.broadcasted_iota(jnp.int32, (q, kq), 1)
        allowed = (seg_k != 0) & (k_idx <= q_idx) & ((seg_k == seg_q) | (seg_k == par_q))
        if windowed:
            allowed &= (q_meta[:, 2:3] - k_meta_ref[1:2, :]) < window_ref[0]
        s = jnp.where(allowed[None], s.reshape(x, q, kq), MASKED).reshape(rows, kq)
        m_prev = m_ref[...]
        m_next = jnp.maximum(m_prev, s.max(axis=1, keepdims=True))  # [X*Q, 128]
        p = jnp.exp(s - _lanes(m_next, kq))  # [X*Q, Q]
        alpha = jnp.exp(m_prev - m_next)
        l_ref[...] = alpha * l_ref[...] + p.sum(axis=1, keepdims=True)
        m_ref[...] = m_next
        pv = jax.lax.dot_general(
            p.astype(v_ref.dtype), v_ref[...], _NN, precision=exact,
            preferred_element_type=jnp.float32,
        )  # fmt: skip
        acc_ref[...] = acc_ref[...] * _lanes(alpha, e) + pv  # [X*Q, E]

    @pl.when(kj == pl.num_programs(3) - 1)
    def _write():
        total, acc = l_ref[...], acc_ref[...]
        if finish:
            (out_ref,) = outs
            out = acc / _lanes(jnp.where(total > 0, total, 1.0), e)
            out_ref[...] = out.reshape(x, q, e).astype(out_ref.dtype)
            return
        stats_ref, acc_out_ref = outs
        m = jnp.where(total > 0, m_ref[...], MASKED)
        row = jax.lax.broadcasted_iota(jnp.int32, (_SUBLANES, rows), 0)
        # columns to rows: sublane 0 the max, the others the sum, [8, X*Q]
        stats_ref[...] = jnp.where(row == 0, m.T[:_SUBLANES], total.T[:_SUBLANES])
        acc_out_ref[...] = acc.reshape(x, q, e)


def _run(q, k, v, mask: Mask, *, scale, softcap, block, interpret, finish, q_blocks=None):
    """The kernel over rows padded to a multiple of `block`: the finished [B, G, X, T, E] output
    (`finish`), else the state (m, total, acc), all for the padded T. `q_blocks`: q holds only
    these query blocks ([Aq] int32) of the row that k, v and `mask` hold whole."""
    if block % _LANES:
        raise JaxevalError(
            f"the TPU attention kernel's blocks are multiples of {_LANES} rows, not {block}",
            hint=f"choose an attention block of {_LANES}, {2 * _LANES}, ...",
        )
    b, tq, h, e = q.shape
    t = k.shape[1]
    g = k.shape[2]
    x = h // g
    n = t // block
    nq = tq // block
    ids = jnp.arange(n, dtype=jnp.int32) if q_blocks is None else jnp.asarray(q_blocks, jnp.int32)
    segment, parent, positions, window = mask
    q5 = q.reshape(b, tq, g, x, e).transpose(0, 2, 3, 1, 4)  # [B, G, X, Aq*Q, E]
    k4, v4 = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, G, T, E]
    q_meta = jnp.stack([segment, parent, positions], -1).astype(jnp.int32)  # [B, T, 3]
    q_meta = jnp.pad(q_meta, ((0, 0), (0, 0), (0, _LANES - 3)))  # [B, T, 128]
    if q_blocks is not None:  # the held query blocks' rows: [B, Aq*Q, 128]
        q_meta = q_meta.reshape(b, n, block, _LANES)[:, ids].reshape(b, tq, _LANES)
    k_meta = jnp.stack([segment, positions], 1).astype(jnp.int32)  # [B, 2, T]
    k_meta = jnp.pad(k_meta, ((0, 0), (0, _SUBLANES - 2), (0, 0)))  # [B, 8, T]
    visible = row_visibility(mask, block=block)[:, ids]  # [B, Aq, A]
    first, last = visit_range(visible)  # [B, Aq]
    prefetch = (
        jnp.asarray(scale, jnp.float32).reshape(1),
        jnp.asarray(NO_WINDOW if window is None else window, jnp.int32).reshape(1),
        pack_visibility(visible),
        first.reshape(-1),
        last.reshape(-1),
        ids,
    )

    def kv_map(bi, gi, qi, kj, scale_ref, window_ref, visible_ref, first_ref, last_ref, ids_ref):
        at = bi * nq + qi
        return bi, gi, key_block(kj, first_ref[at], last_ref[at]), 0

    def k_meta_map(
        bi, gi, qi, kj, scale_ref, window_ref, visible_ref, first_ref, last_ref, ids_ref
    ):
        at = bi * nq + qi
        return bi, 0, key_block(kj, first_ref[at], last_ref[at])

    heads_spec = pl.BlockSpec(
        (None, None, x, block, e), lambda bi, gi, qi, kj, *_: (bi, gi, 0, qi, 0)
    )
    in_specs = [
        heads_spec,
        pl.BlockSpec((None, None, block, e), kv_map),
        pl.BlockSpec((None, None, block, e), kv_map),
        pl.BlockSpec((None, block, _LANES), lambda bi, gi, qi, kj, *_: (bi, qi, 0)),
        pl.BlockSpec((None, _SUBLANES, block), k_meta_map),
    ]
    if finish:
        out_shape = [jax.ShapeDtypeStruct(q5.shape, v.dtype)]
        out_specs = [heads_spec]
    else:
        out_shape = [
            jax.ShapeDtypeStruct((b, g, nq, _SUBLANES, x * block), jnp.float32),
            jax.ShapeDtypeStruct(q5.shape, jnp.float32),
        ]
        out_specs = [
            pl.BlockSpec(
                (None, None, None, _SUBLANES, x * block),
                lambda bi, gi, qi, kj, *_: (bi, gi, qi, 0, 0),
            ),
            heads_spec,
        ]
    # Declared cost, for every row one causal request (an upper bound on the visited blocks); a
    # device's zig-zag share of a row's query blocks (`attention.sequence`) visits Aq/A of it.
    visits = b * g * nq * (n + 1) // 2
    pair_count = visits * x * block * block
    kv_bytes = visits * block * (2 * e * k.dtype.itemsize + _SUBLANES * 4)
    cost = pl.CostEstimate(
        flops=4 * pair_count * e,
        transcendentals=pair_count * (1 if softcap is None else 2),
        bytes_accessed=kv_bytes
        + q5.size * q.dtype.itemsize
        + sum(s.size * s.dtype.itemsize for s in out_shape)
        + b * g * tq * _LANES * 4,
    )
    kernel = functools.partial(
        _kernel, softcap=softcap, windowed=window is not None, finish=finish, n_rows=nq,
        n_blocks=n,
    )  # fmt: skip
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=len(prefetch),
        grid=(b, g, nq, n),
        in_specs=in_specs,
        out_specs=out_specs,
        scratch_shapes=[
            pltpu.VMEM((x * block, _LANES), jnp.float32),
            pltpu.VMEM((x * block, _LANES), jnp.float32),
            pltpu.VMEM((x * block, e), jnp.float32),
        ],
    )
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")
        ),
        cost_estimate=cost,
        interpret=interpret if isinstance(interpret, pltpu.InterpretParams) else bool(interpret),
        name="packed_attention",
    )(*prefetch, q5, k4, v4, q_meta, k_meta)


def _padded(block: int, q, k, v, mask: Mask) -> tuple[jax.Array, jax.Array, jax.Array, Mask]:
    """q, k, v [B, T, ...] and the mask's [B, T] arrays padded with zeros (segment 0: seen by
    nobody) to a multiple of `block`."""
    pad = -q.shape[1] % block

    def padded(a):
        return jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2)) if pad else a

    rows = (mask.segment, mask.parent, mask.positions)
    return padded(q), padded(k), padded(v), Mask(*map(padded, rows), mask.window)


def _whole(block: int, q, k, v, mask: Mask, q_blocks) -> tuple:
    """`_padded`, or with `q_blocks` the operands as they are (whole blocks, checked)."""
    if q_blocks is None:
        return _padded(block, q, k, v, mask)
    if q.shape[1] % block or k.shape[1] % block:
        raise JaxevalError(
            f"held query blocks need rows of whole blocks of {block}: {q.shape[1]} queries, "
            f"{k.shape[1]} keys"
        )
    return q, k, v, mask


def packed_state(
    q: Float["B T H E"],
    k: Float["B T G E"],
    v: Float["B T G E"],
    mask: Mask,
    *,
    scale: Float[""],
    softcap: float | None,
    block: int = 128,
    interpret: bool | pltpu.InterpretParams = False,
    q_blocks: IntAq | None = None,
) -> State:
    """The online-softmax state of each query over its row's own keys: m, total [B, G, X, T] and
    acc [B, G, X, T, E], float32 (`mask.State`).

    `interpret` runs the kernel on any host: True, Pallas's interpreter (fast); a
    `pltpu.InterpretParams`, the TPU simulator (DMAs, uninitialised VMEM: slow, for small grids).
    `q_blocks`: q holds only these query blocks of the row (`packed_attention`).
    """
    b, t, h, e = q.shape
    g = k.shape[2]
    x = h // g
    padded = _whole(block, q, k, v, mask, q_blocks)
    n = padded[0].shape[1] // block
    stats, acc = _run(
        *padded, scale=scale, softcap=softcap, block=block, interpret=interpret, finish=False,
        q_blocks=q_blocks,
    )  # fmt: skip
    # [B, G, A, X*Q] -> [B, G, X, T]
    stats = stats[:, :, :, :2].reshape(b, g, n, 2, x, block).transpose(3, 0, 1, 4, 2, 5)
    m, total = stats.reshape(2, b, g, x, n * block)[:, :, :, :, :t]
    return m, total, acc[:, :, :, :t]


def packed_attention(
    q: Float["B T H E"],
    k: Float["B T G E"],
    v: Float["B T G E"],
    mask: Mask,
    *,
    scale: Float[""],
    softcap: float | None,
    block: int = 128,
    init: State | None = None,
    interpret: bool | pltpu.InterpretParams = False,
    q_blocks: IntAq | None = None,
) -> Float["B T H E"]:
    """`blocked_attend` on a TPU: packed rows' attention under `mask`, continuing from `init` (an
    online-softmax state over keys seen before, [B, G, X, T] m and total, [B, G, X, T, E] acc)
    when given. Output in v's dtype; a query that saw nothing gets zeros.

    `q_blocks`: q [B, Aq*Q, H, E] holds only these query blocks ([Aq] int32) of the row that k,
    v and `mask` hold whole, T a multiple of the block (sequence parallelism:
    `jaxeval.models.attention.sequence`); the grid runs Aq query blocks.
    """
    b, t, h, e = q.shape
    if init is None:
        padded = _whole(block, q, k, v, mask, q_blocks)
        (out,) = _run(
            *padded, scale=scale, softcap=softcap, block=block, interpret=interpret, finish=True,
            q_blocks=q_blocks,
        )  # fmt: skip
        out = out[:, :, :, :t]  # [B, G, X, T, E]
    else:
        m1, total1, acc1 = packed_state(
            q, k, v, mask, scale=scale, softcap=softcap, block=block, interpret=interpret,
            q_blocks=q_blocks,
        )  # fmt: skip
        m0, total0, acc0 = init
        m = jnp.maximum(m0, m1)  # [B, G, X, T]
        c0, c1 = jnp.exp(m0 - m), jnp.exp(m1 - m)
        total = total0 * c0 + total1 * c1
        acc = acc0 * c0[..., None] + acc1 * c1[..., None]  # [B, G, X, T, E]
        out = acc / jnp.where(total > 0, total, 1.0)[..., None]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, e).astype(v.dtype)
