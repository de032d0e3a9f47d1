"""Decode steps on TPUs: one new token per row over the KV cache, as one Pallas (Mosaic) kernel, and
the step's keys written into the cache slot by slot (`write_row_slots`).

    decode_state(qm [B, G, X, E], cache, layer, bound [B], q_pos [B], window, scale, softcap)
        -> m [B, G, X], total [B, G, X], acc [B, G, X, E]   (float32)

    cache: k [L, B, G, E, C], v [L, B, G, C, E], valid [B, C], positions [B, C]  (`KVCache`)

is the online-softmax state (`mask.State`: the output is acc / total) of each row's X query
heads per kv head over the slots j of layer `layer` with `valid[b, j]`, `j < bound[b]` and, on
a sliding-window layer, `q_pos[b] - positions[b, j] < window`: the same job as the CPU kernel's
`cpu.cpu_decode_state` (the `tpu` backend's `cache_state` calls this), whose state the decoder
then folds the step's own key into. A row that sees nothing gets m = MASKED,
total = 0, acc = 0, so that the step's own key alone decides its output.

**Reading only the written prefix (a decode step is memory-bound).** The grid is (B, G, C/Q), the
cache blocks innermost. The K and V index maps take `layer` and `bound` from scalar prefetch
(SMEM), pick layer `layer` and clamp the block to the row's last needed one,
`max(ceil(bound/Q) - 1, 0)` (`read_block`); a step whose block index repeats the previous step's
issues no DMA, and its body is skipped (`pl.when(j*Q < bound)`). C = 2,048 slots, Q = 512:

    row  bound   grid step j   0  1  2  3    blocks read (DMA)   blocks computed
    0        1   read_block    0  0  0  0    0                   0
    1      700                 0  1  1  1    0, 1                0, 1
    2    2,048                 0  1  2  3    0, 1, 2, 3          0, 1, 2, 3
    3        0                 0  0  0  0    0 (never used)      none

Keys are read as [E, Q] tiles straight from the cache's [L, B, G, E, C] layout and values as
[Q, E] tiles from [L, B, G, C, E]: nothing is transposed or copied outside the kernel. `valid`
(and, on window layers, `positions`) travel as one small int32 [B, 1, C] (or [B, 2, C]) array. Keep
C a multiple of 128 on a TPU: XLA lays out a [.., E, C] array whose C is not with E minor, and
would then hand the kernel a transposed copy of the whole K cache.

**Blocks.** Q = C when C <= `block` (one block of the full length); else `block` must be a multiple
of 128, and when it does not divide C the last block runs past the cache: Pallas copies the slots
that exist and the rest of the buffer is stale. Such slots are >= C >= bound, so they are masked,
and value rows at or past the bound are zeroed before the weighted sum (0 * NaN would be NaN).

**Numerics: the reference's (`jaxeval.models.attention.cache_state`).** Cache tiles are cast to q's (the compute) dtype; the scores
q.k accumulate in float32, are rounded to the compute dtype, scaled, soft-capped
(`tanh(s/softcap) * softcap`), then the softmax runs in float32 and its weights are cast to the
compute dtype before the values (float32 accumulation). Only the float32 summation order differs
from the reference (and an empty row's state, whose leftovers the reference's next key zeroes).
Dimension names: `jaxeval.shapes`; X here is X*T of the reference's rows-merged queries, T = 1.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxeval.ops.attention.mask import MASKED
from jaxeval.shapes import Float, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters
HIGHEST = jax.lax.Precision.HIGHEST
LANES = 128  # a TPU vector register's lanes: cache blocks shorter than C are multiples of it


def block_size(c: int, block: int) -> int:
    """Cache slots per block Q for a cache of C slots: C itself when C <= `block`, else `block`,
    which must then be a multiple of 128 (a TPU tile's lanes)."""
    if c <= block:
        return c
    if block % LANES:
        raise ValueError(f"cache block {block} must be a multiple of {LANES} (C = {c})")
    return block


def read_block(j, bound, block: int):
    """The cache block that grid step j reads for a row of `bound` visible slots: j, clamped to
    the row's last needed block max(ceil(bound/Q) - 1, 0), so later steps repeat it (no DMA)."""
    last = jnp.maximum(jax.lax.div(bound + block - 1, block) - 1, 0)  # bound >= 0: no floor
    return jnp.minimum(j, last)


def _specs(x: int, e: int, block: int, meta_rows: int):
    """BlockSpecs of (q, k, v, meta) and of the three outputs, over the grid (B, G, C/Q). Index
    maps get the grid indices, then the scalar-prefetch refs (layer, bound, q_pos, window, scale)."""
    sq = pl.squeezed

    def keys(b, g, j, layer_ref, bound_ref, *_):
        return layer_ref[0], b, g, 0, read_block(j, bound_ref[b], block)

    def values(b, g, j, layer_ref, bound_ref, *_):
        return layer_ref[0], b, g, read_block(j, bound_ref[b], block), 0

    def meta(b, g, j, layer_ref, bound_ref, *_):
        return b, 0, read_block(j, bound_ref[b], block)

    def head(b, g, j, *_):
        return b, g, 0, 0

    inputs = (
        pl.BlockSpec((sq, sq, x, e), head),  # q: [X, E]
        pl.BlockSpec((sq, sq, sq, e, block), keys),  # k: [E, Q] of layer `layer`
        pl.BlockSpec((sq, sq, sq, block, e), values),  # v: [Q, E]
        pl.BlockSpec((sq, meta_rows, block), meta),  # valid, slot positions: [1, Q] or [2, Q]
    )
    outputs = (
        pl.BlockSpec((sq, sq, x, 1), head),  # m: [X, 1]
        pl.BlockSpec((sq, sq, x, 1), head),  # total: [X, 1]
        pl.BlockSpec((sq, sq, x, e), head),  # acc: [X, E]
    )
    return inputs, outputs


def _kernel(
    layer_ref, bound_ref, q_pos_ref, window_ref, scale_ref,  # scalar prefetch (SMEM)
    q_ref, k_ref, v_ref, meta_ref,  # [X, E], [E, Q], [Q, E], and [1, Q] or [2, Q]
    m_ref, total_ref, acc_ref,  # outputs: [X, 1], [X, 1], [X, E]
    m_s, total_s, acc_s,  # VMEM scratch, the running state of this (row, kv head)
    *, block: int, softcap: float | None, windowed: bool,
):  # fmt: skip
    b, j = pl.program_id(0), pl.program_id(2)
    bound = bound_ref[b]
    start = j * block

    @pl.when(j == 0)
    def _init():
        m_s[...] = jnp.full(m_s.shape, MASKED, jnp.float32)
        total_s[...] = jnp.zeros(total_s.shape, jnp.float32)
        acc_s[...] = jnp.zeros(acc_s.shape, jnp.float32)

    @pl.when(start < bound)
    def _fold_block():
        q = q_ref[...]
        dtype = q.dtype
        precision = HIGHEST if dtype == jnp.float32 else None  # Mosaic: fp32 passes for fp32 only
        k = k_ref[...].astype(dtype)
        s = jnp.dot(q, k, precision=precision, preferred_element_type=jnp.float32)  # [X, Q]
        s = s.astype(dtype) * jnp.full((1, 1), scale_ref[0], jnp.float32).astype(dtype)
        if softcap is not None:
            s = jnp.tanh(s / softcap) * softcap
        slots = start + jax.lax.broadcasted_iota(jnp.int32, (1, block), 1)  # [1, Q]
        ok = (slots < bound) & (meta_ref[0:1, :] != 0)
        if windowed:
            ok &= (q_pos_ref[b] - meta_ref[1:2, :]) < window_ref[0]
        s = jnp.where(ok, s.astype(jnp.float32), MASKED)
        m_prev = m_s[...]  # [X, 1]
        m_new = jnp.maximum(m_prev, s.max(axis=1, keepdims=True))
        correction = jnp.exp(m_prev - m_new)
        p = jnp.where(ok, jnp.exp(s - m_new), 0.0)  # [X, Q]; masked slots weigh exactly 0
        total_s[...] = total_s[...] * correction + p.sum(axis=1, keepdims=True)
        rows = start + jax.lax.broadcasted_iota(jnp.int32, (block, 1), 0)  # [Q, 1]
        v = jnp.where(rows < bound, v_ref[...].astype(dtype), 0)  # stale slots: never NaN * 0
        pv = jnp.dot(p.astype(dtype), v, precision=precision, preferred_element_type=jnp.float32)
        acc_s[...] = acc_s[...] * correction + pv
        m_s[...] = m_new

    @pl.when(j == pl.num_programs(2) - 1)
    def _write():
        m_ref[...] = m_s[...]
        total_ref[...] = total_s[...]
        acc_ref[...] = acc_s[...]


def decode_state(
    qm: Float["B G X E"],
    cache: Any,
    layer: Int[""],
    bound: IntB,
    q_pos: IntB,
    window: Int[""] | None,
    scale: Float[""],
    softcap: float | None,
    *,
    block: int = 512,
    interpret: bool | pltpu.InterpretParams = False,
) -> tuple[Float["B G X"], Float["B G X"], Float["B G X E"]]:
    """The online-softmax state over each row's visible cache slots (module docstring).

    `cache`: the KV cache, any object with the fields of the model contract's `KVCache` (k, v,
    valid, positions), which this layer does not import.
    `layer`, `bound`, `q_pos`, `window` (None: no window term; `mask.NO_WINDOW` keeps all) and
    `scale` are run-time values (scalar prefetch); `softcap`, `block` and `interpret` are static.
    `interpret`: True runs the kernel as plain JAX ops on any host (fast; tests), a
    `pltpu.InterpretParams` in Pallas's simulator of TPU memory and DMAs (slow, faithful: stale
    buffer contents are NaN); False compiles it with Mosaic for a TPU.
    """
    k_cache, v_cache, valid, slot_pos = cache.k, cache.v, cache.valid, cache.positions
    b, g, x, e = qm.shape
    c = k_cache.shape[4]
    block = block_size(c, block)
    windowed = window is not None
    bound = jnp.clip(jnp.asarray(bound, jnp.int32), 0, c)  # [B]; slots >= C do not exist
    meta = valid.astype(jnp.int32)[:, None, :]  # [B, 1, C]
    if windowed:
        positions = slot_pos.astype(jnp.int32)[:, None, :]
        meta = jnp.concatenate([meta, positions], axis=1)  # [B, 2, C]
    scalars = (
        jnp.asarray(layer, jnp.int32).reshape(1),
        bound,
        jnp.asarray(q_pos, jnp.int32).reshape(b),
        jnp.asarray(window if windowed else 0, jnp.int32).reshape(1),
        jnp.asarray(scale, jnp.float32).reshape(1),
    )
    in_specs, out_specs = _specs(x, e, block, meta.shape[1])
    state = jax.ShapeDtypeStruct((b, g, x, 1), jnp.float32)
    # Bytes: K and V of one layer at the full C, the static upper bound (a row reads only its
    # ceil(bound/Q) blocks, at least one), plus q, the masks and the outputs.
    kv_bytes = 2 * b * g * c * e * k_cache.dtype.itemsize
    out_bytes = b * g * x * (e + 2) * 4
    cost = pl.CostEstimate(
        flops=4 * b * g * x * c * e,
        transcendentals=b * g * x * c * (2 if softcap is not None else 1),
        bytes_accessed=kv_bytes + qm.size * qm.dtype.itemsize + meta.size * 4 + out_bytes,
    )
    call = pl.pallas_call(
        functools.partial(_kernel, block=block, softcap=softcap, windowed=windowed),
        out_shape=(state, state, jax.ShapeDtypeStruct((b, g, x, e), jnp.float32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(scalars),
            grid=(b, g, pl.cdiv(c, block)),
            in_specs=in_specs,
            out_specs=out_specs,
            scratch_shapes=[
                pltpu.VMEM((x, 1), jnp.float32),
                pltpu.VMEM((x, 1), jnp.float32),
                pltpu.VMEM((x, e), jnp.float32),
            ],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="jaxeval_tpu_decode_attention",
    )
    m, total, acc = call(*scalars, qm, k_cache, v_cache, meta)
    return m[..., 0], total[..., 0], acc


def write_row_slots(
    cache: Any,
    k: Float["L B 1 G E"],
    v: Float["L B 1 G E"],
    index: IntB,
) -> tuple[Float["L B G E C"], Float["L B G C E"]]:
    """The cache's keys and values (`decode_state`'s `cache`) with k, v written:
    cache.k[:, r, :, :, index[r]] <- k[:, r, 0] for every row r (index >= C: dropped), as B
    `dynamic_update_slice`s of one slot in a loop over one device's rows. The scatter that writes
    all rows at once makes the TPU compiler pick a layout of its own for the whole cache and copy
    the cache into it and back on every decode step (four copies of the cache per step at
    SmolLM2's shapes on a v5e-8); a one-slot update keeps the cache's layout and touches
    L * G * E values per row. (Under the SPMD partitioner a loop over the rows of a sharded cache
    would gather the cache: hence the `tpu` backend runs it under `jax.shard_map`.)"""
    k_cache, v_cache = cache.k, cache.v
    c = k_cache.shape[4]
    zero = jnp.zeros((), jnp.int32)
    k_t = jnp.transpose(k, (0, 1, 3, 4, 2)).astype(k_cache.dtype)  # [L, B, G, E, 1]
    v_t = jnp.transpose(v, (0, 1, 3, 2, 4)).astype(v_cache.dtype)  # [L, B, G, 1, E]

    def one_row(r, caches):
        kc, vc = caches
        slot = jnp.minimum(index[r], c - 1)
        keep = index[r] >= c  # past the cache: the slot keeps what it holds
        k_at, v_at = (zero, r, zero, zero, slot), (zero, r, zero, slot, zero)
        k_new = jax.lax.dynamic_slice_in_dim(k_t, r, 1, axis=1)
        v_new = jax.lax.dynamic_slice_in_dim(v_t, r, 1, axis=1)
        k_new = jnp.where(keep, jax.lax.dynamic_slice(kc, k_at, k_new.shape), k_new)
        v_new = jnp.where(keep, jax.lax.dynamic_slice(vc, v_at, v_new.shape), v_new)
        return jax.lax.dynamic_update_slice(kc, k_new, k_at), jax.lax.dynamic_update_slice(
            vc, v_new, v_at
        )

    return jax.lax.fori_loop(0, k.shape[1], one_row, (k_cache, v_cache))
