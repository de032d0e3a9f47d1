"""The `tpu` backend: the Pallas TPU kernels (`jaxeval.ops.attention.tpu_packed`, `tpu_decode`),
any dtype; on a mesh that is not on TPUs they run in Pallas's interpret mode (tests).

    packed       `tpu_packed.packed_attention`: packed rows with block skipping, blocks a multiple
                 of 128 (the lane width) and at most 2,048 query rows a program (`fit_block`);
                 a device's query blocks of a row (`q_blocks`, `attention.sequence`) run the
                 same kernel inside the caller's `shard_map`;
                 latent attention's value heads (a head dim of their own): the reference
    cache_state  a decode step (`is_decode_step`): `tpu_decode.decode_state`, each row's cache
                 blocks read up to its length; else (a prefill, a shared prefix, MLA) the
                 reference's loop over blocks of `cache_block`
    write_slots  a decode step's keys one slot per row (`tpu_decode.write_row_slots`); else the
                 reference's scatter

Sharding: the kernels see one device's rows and heads. Under the mesh a call is given (`mesh=`,
the runtime's mesh when it has several devices) each call runs inside `jax.shard_map`
(`sharded_call`) over the batch axes (rows, `platform.mesh.rows_axis`) and the kv heads' axis
(`models.sharding`'s rule for `kv_heads`), so the partitioner never has to split a custom call:
each device sees its own rows (all rows when they do not split) and kv heads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxeval.models.attention import reference
from jaxeval.models.attention.backend import block_rule, is_decode_step
from jaxeval.models.contract import ROW_AXES, KVCache
from jaxeval.models.sharding import logical_sharding
from jaxeval.ops.attention.mask import Mask
from jaxeval.platform.mesh import rows_axis

CACHE_HEADS = KVCache(k=2, v=2, valid=None, positions=None)  # where each field keeps its G heads


def _one_head_dim(*xs: Any) -> bool:
    """q, k and v share one head dim (the Pallas kernels' layout; MLA's values differ)."""
    return len({x.shape[-1] for x in xs}) == 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpuAttention:
    """Pallas TPU kernels for packed rows and decode steps (`AttentionBackend`, module docstring);
    rows shorter than `min_length` keep the dense scores. Blocks are multiples of 128."""

    name: str = "tpu"
    min_length: int = 128
    max_block: int = 512
    cache_block: int = 512
    interpret: bool = False  # Pallas interpret mode: a mesh not on TPUs

    def block_size(self, length: int, block: int | None = None) -> int:
        return block_rule(
            length, block, min_length=self.min_length, max_block=self.max_block, min_block=128
        )

    def packed(self, q, k, v, mask, *, scale, softcap, block, init, q_blocks=None, mesh=None):
        if not _one_head_dim(q, k, v):  # latent attention's value heads: the reference
            return reference.blocked_attend(
                q, k, v, mask, scale=scale, softcap=softcap, block=block, init=init,
                q_blocks=q_blocks,
            )  # fmt: skip
        if q_blocks is not None:  # a device's share of a row (`attention.sequence`): no mesh
            # Pallas: imported when a TPU model first traces
            from jaxeval.ops.attention import tpu_packed

            fit = tpu_packed.fit_block(block, q.shape[2] // k.shape[2])
            r = block // fit  # the kernel's blocks: each held block in r pieces
            ids = (q_blocks[:, None] * r + jnp.arange(r, dtype=jnp.int32)).reshape(-1)
            return tpu_packed.packed_attention(
                q, k, v, mask, scale=scale, softcap=softcap, block=fit, init=init,
                interpret=self.interpret, q_blocks=ids,
            )  # fmt: skip
        # Pallas: imported when a TPU model first traces
        from jaxeval.ops.attention import tpu_packed

        x = q.shape[2] // k.shape[2]  # query heads per kv head
        segment, parent, positions, window = mask

        def call(q, k, v, segment, parent, positions, init, window, scale):
            return tpu_packed.packed_attention(
                q, k, v, Mask(segment, parent, positions, window), scale=scale, softcap=softcap,
                block=tpu_packed.fit_block(max(128, block), x), init=init,
                interpret=self.interpret,
            )  # fmt: skip

        # rows at dimension 0 everywhere; kv heads: q/k/v [B, T, H|G, E] at 2, init [B, G, ...] at 1
        return sharded_call(
            mesh, call, (q, k, v, segment, parent, positions, init), (window, scale),
            heads=(2, 2, 2, None, None, None, 1), out_heads=2, kv_heads=k.shape[2],
        )  # fmt: skip

    def cache_state(self, q, cache, layer, q_positions, index, *, window, scale, softcap,
                    mesh=None):  # fmt: skip
        # cache.k [L, B, G, E, C]: the kernel's q, k and v share one head dim (not MLA's latent)
        same_dims = q.shape[-1] == cache.k.shape[3] == cache.v.shape[-1]
        if not (is_decode_step(q, cache) and same_dims):
            return reference.cache_state(
                q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap,
                block=self.cache_block,
            )  # fmt: skip
        # Pallas: imported when a TPU model first traces
        from jaxeval.ops.attention import tpu_decode

        qm = reference.merged_queries(q, cache.k.shape[2])  # [B, G, X, E]
        row_index = jnp.broadcast_to(jnp.asarray(index, jnp.int32), q.shape[:1])  # [B]

        def call(qm, cache, row_index, q_pos, layer, window, scale):
            return tpu_decode.decode_state(
                qm, cache, layer, row_index, q_pos, window, scale, softcap,
                block=self.cache_block, interpret=self.interpret,
            )  # fmt: skip

        # the cache's rows and heads where the contract keeps them; qm [B, G, X*T, E] and the
        # state have rows at 0 and kv heads at 1
        state = sharded_call(
            mesh, call, (qm, cache, row_index, q_positions[:, 0]), (layer, window, scale),
            heads=(1, CACHE_HEADS, None, None), out_heads=1, kv_heads=cache.k.shape[2],
            rows=(0, ROW_AXES, 0, 0),
        )  # fmt: skip
        return reference.split_state(state, 1)

    def write_slots(self, cache, k, v, index, *, mesh=None):
        """A decode step (one key per row, a slot per row): each device writes its own rows'
        slots with one-slot `dynamic_update_slice`s (`tpu_decode.write_row_slots`), under
        `jax.shard_map` on `mesh`; anything else the reference's scatter."""
        if k.shape[2] != 1 or jnp.ndim(index) != 1:
            return reference.write_slots(cache, k, v, index)
        # Pallas: imported when a TPU model first traces
        from jaxeval.ops.attention import tpu_decode

        # cache.k [L, B, G, E, C], cache.v [L, B, G, C, E], k, v [L, B, 1, G, E], index [B]
        k_cache, v_cache = sharded_call(
            mesh, tpu_decode.write_row_slots, (cache, k, v, index), (),
            heads=(CACHE_HEADS, 3, 3, None), out_heads=2, kv_heads=cache.k.shape[2],
            rows=(ROW_AXES, 1, 1, 0), out_rows=1,
        )  # fmt: skip
        return cache._replace(k=k_cache, v=v_cache)


def sharded_call(mesh, fn, args, scalars, *, heads, out_heads, kv_heads, rows=None, out_rows=0):
    """`fn(*args, *scalars)` on each device's rows and kv heads of `mesh` (`jax.shard_map`), or
    plainly on a mesh of one device (or none).

    `args` are arrays, pytrees of arrays (a `State`, a `KVCache`) or None, `rows[i]` /
    `heads[i]` their row and kv-head dimensions (default rows: 0; None: the argument has none),
    one for all of an argument's leaves or a tree of them shaped like it (`ROW_AXES` for a
    `KVCache`); `scalars` (None or 0-d) are replicated. The outputs (one array or a tuple) have rows at `out_rows` and kv heads at
    `out_heads`.
    Rows split over the batch axes when every row count divides by their devices (else each
    device computes all rows: a call on one admitted prompt); kv heads as the parameters' rule
    for `kv_heads` puts them (`logical_sharding`: over `model` when they divide it), else every
    device of the axis computes all heads (the result is the same).
    """
    if mesh is None or mesh.devices.size == 1:
        return fn(*args, *scalars)
    rows = rows or (0,) * len(args)
    # the batch rule (`mesh.rows_axis`) for every argument's rows, or none of them split (e.g. one
    # admitted prompt: every device has it all)
    splits = [
        rows_axis(mesh, leaf.shape[r])
        for x, dims in zip(args, rows)
        if x is not None
        for leaf, r in zip(jax.tree.leaves(x), _leaf_dims(x, dims))
        if r is not None
    ]
    batch = splits[0] if splits and None not in splits else None
    model = logical_sharding(mesh, ("kv_heads",), (kv_heads,)).spec[0]

    def part(ndim, r, h):
        dims = [None] * ndim
        if r is not None:
            dims[r] = batch
        if h is not None and model is not None:
            dims[h] = model
        return P(*dims)

    values = (*args, *scalars)
    present = [i for i, x in enumerate(values) if x is not None]  # None passes through, unmapped
    specs = [
        jax.tree.unflatten(
            jax.tree.structure(x),
            [
                part(leaf.ndim, r, h)
                for leaf, r, h in zip(jax.tree.leaves(x), _leaf_dims(x, r), _leaf_dims(x, h))
            ],
        )
        for x, r, h in zip(args, rows, heads)
    ] + [P()] * len(scalars)

    def local(*given):
        full = [None] * len(values)
        for i, x in zip(present, given):
            full[i] = x
        return fn(*full)

    out = jax.eval_shape(fn, *values)
    out_specs = jax.tree.map(lambda o: part(o.ndim, out_rows, out_heads), out)
    mapped = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=tuple(specs[i] for i in present),
        out_specs=out_specs,
        check_vma=False,
    )
    return mapped(*(values[i] for i in present))


def _leaf_dims(x: Any, dims: Any) -> list:
    """`dims` for each leaf of argument `x`: one dimension (or None) for all of them, or a tree
    of them shaped like `x` (`ROW_AXES`: KVCache(k=1, v=1, valid=0, positions=0))."""
    n = len(jax.tree.leaves(x))
    if dims is None or isinstance(dims, int):
        return [dims] * n
    return jax.tree.structure(x).flatten_up_to(dims)
