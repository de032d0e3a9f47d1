"""Slot parallelism: an engine of fewer rows than batch devices splits its KV cache's slots.

    split = slots_split(mesh, rows=B, slots=C)     # None: the rows split over the devices
    split.shardings(heads)                         # k, v: C over the batch axes; flags whole
    state = split.cache_state(backend, q, cache, layer, q_positions, index, ...)
    cache = split.write_slots(backend, cache, k, v, index)
    cache = split.install(cache, k_new, v_new, dst, src, start, prefix)

**When.** A generation engine keeps each row's cache on one device when its B rows divide over
the n devices of the batch axes. A row longer than one device's memory holds (131,072 slots of
Llama-3.1-8B: 16 GiB) cannot; an engine of B < n rows then splits each row's C slots over the
n devices instead: device d holds slots [d C/n, (d + 1) C/n) of every row, contiguous, so a
decode step reads each device's shard once. C must cut into n pieces of whole `LANE` slots.
The slot flags and positions ([B, C] booleans and integers) stay whole on every device.

**Reading.** Each device runs its backend's `cache_state` (the Pallas decode kernel on a TPU)
over its own slots, with each row's index moved to its shard (`index - d C/n`, clipped to the
shard), and the n online-softmax states merge by their running maxima (a log-sum-exp): the
state of all slots before the index, up to float32 summation order.

**Writing.** A decode step's keys go to the device holding their slot, through the backend's
own one-slot write (the TPU's `write_row_slots`); the other devices drop them.
An admission's prompt keys [L, U, P, G, E] arrive split into n pieces of P/n tokens (whole when
P does not divide); the pieces go round the devices (n - 1 `ppermute`s), each device writing the
tokens that land in its slots, so no device holds more than two pieces. A shared prefix (one
small replicated row) is written the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.models.attention.backend import AttentionBackend
from jaxeval.models.attention.sequence import shard_map_given
from jaxeval.models.contract import KVCache
from jaxeval.ops.attention.mask import State
from jaxeval.platform.mesh import batch_axes, batch_entry, batch_shards, constrain_to
from jaxeval.shapes import Float, Int

LANE = 128  # slots per device come in whole multiples of this (a TPU lane width)

IntB = Int["B"]
IntR = Int["R"]


def slots_split(mesh: Mesh | None, *, rows: int, slots: int) -> SlotSplit | None:
    """The split of an engine of B = `rows` rows x C = `slots` slots on `mesh` (module
    docstring), or None: no mesh of several batch devices, the rows divide over them, or C does
    not cut into n pieces of whole `LANE` slots."""
    if mesh is None or not slot_splits(batch_shards(mesh), rows, slots):
        return None
    return SlotSplit(mesh=mesh, ways=batch_shards(mesh), slots=slots)


def slot_splits(ways: int, rows: int, slots: int) -> bool:
    """`slots_split`'s rule by numbers: B rows < n ways (not a multiple of them) and C slots in n
    pieces of whole `LANE` slots (the engine's sizing asks it before it has a mesh)."""
    return ways > 1 and rows % ways != 0 and slots % (ways * LANE) == 0


def _heads_entry(mesh: Mesh, g: int) -> Any:
    from jaxeval.models.sharding import logical_sharding  # the rule table imports this package

    return logical_sharding(mesh, ("kv_heads",), (g,)).spec[0]


@dataclasses.dataclass(frozen=True)
class SlotSplit:
    """C slots of every row in n contiguous pieces over the batch axes (module docstring)."""

    mesh: Mesh
    ways: int  # n
    slots: int  # C

    @property
    def local(self) -> int:
        """C/n: the slots each device holds."""
        return self.slots // self.ways

    @property
    def axes(self) -> tuple[str, ...]:
        return batch_axes(self.mesh)

    def specs(self, g: int) -> tuple[P, P, P]:
        """PartitionSpecs of k [L, B, G, E, C], v [L, B, G, C, E] and the [B, C] flags."""
        heads, entry = _heads_entry(self.mesh, g), batch_entry(self.mesh)
        return P(None, None, heads, None, entry), P(None, None, heads, entry, None), P()

    def shardings(self, g: int) -> tuple[NamedSharding, NamedSharding, NamedSharding]:
        return tuple(NamedSharding(self.mesh, s) for s in self.specs(g))  # type: ignore[return-value]

    def constrain(self, cache: KVCache) -> KVCache:
        """Inside a jitted kernel: the cache's keys and values pinned to the split."""
        k_s, v_s, _ = self.shardings(cache.k.shape[2])
        return cache._replace(k=constrain_to(cache.k, k_s), v=constrain_to(cache.v, v_s))

    def _device(self) -> jax.Array:
        return jax.lax.axis_index(self.axes)

    def cache_specs(self, g: int) -> KVCache:
        """The split cache's PartitionSpecs, field by field (`specs`)."""
        return KVCache(*self.specs(g), P())

    def cache_state(
        self,
        backend: AttentionBackend,
        q: Float["B T H E"],
        cache: KVCache,
        layer: Int[""],
        q_positions: Int["B T"],
        index: Int[""] | IntB,
        *,
        window: Int[""] | None,
        scale: Float[""],
        softcap: float | None,
    ) -> State:
        """`backend.cache_state` over the split cache: each device over its own slots, the states
        merged (module docstring)."""
        cache_spec = self.cache_specs(cache.k.shape[2])
        heads = cache_spec.k[2]
        axes, n_local = self.axes, self.local
        b = q.shape[0]

        def local(q, cache, layer, q_positions, index, window, scale):
            offset = self._device() * n_local
            valid = jax.lax.dynamic_slice_in_dim(cache.valid, offset, n_local, axis=1)
            positions = jax.lax.dynamic_slice_in_dim(cache.positions, offset, n_local, axis=1)
            row_index = jnp.broadcast_to(jnp.asarray(index, jnp.int32), (b,))
            here = jnp.clip(row_index - offset, 0, n_local)
            m, total, acc = backend.cache_state(  # one device's slots: no mesh
                q, cache._replace(valid=valid, positions=positions), layer, q_positions, here,
                window=window, scale=scale, softcap=softcap,
            )  # fmt: skip
            top = jax.lax.pmax(m, axes)
            c = jnp.exp(m - top)
            total = jax.lax.psum(total * c, axes)
            acc = jax.lax.psum(acc * c[..., None], axes)
            return top, total, acc

        args = (q, cache, layer, q_positions, index, window, scale)
        specs = (P(None, None, heads, None), cache_spec, P(), P(), P(), P(), P())
        state = P(None, heads, None, None)
        out = (state, state, P(None, heads, None, None, None))
        return shard_map_given(local, self.mesh, args, specs, out)

    def _put(self, cache: KVCache, k_rows, v_rows, rows, slots, layer=None) -> KVCache:
        """Local write into this device's slots of `cache`: k_rows [R, T, L, G, E] at (rows
        [R, 1], global slots [R or 1, T]); slots outside this device's piece, and rows past B,
        are dropped. `layer`: k_rows [R, T, 1, G, E] hold that layer alone. The flags are left
        as they are."""
        n_local = self.local
        here = slots - self._device() * n_local
        here = jnp.where((here >= 0) & (here < n_local), here, n_local)
        k, v = cache.k, cache.v
        if layer is not None:  # the indexed axes (layer, row, slot) go first in the update
            k = k.at[layer, rows, :, :, here].set(k_rows[:, :, 0].astype(k.dtype), mode="drop")
            v = v.at[layer, rows, :, here].set(v_rows[:, :, 0].astype(v.dtype), mode="drop")
            return cache._replace(k=k, v=v)
        k = k.at[:, rows, :, :, here].set(k_rows.astype(k.dtype), mode="drop")
        v = v.at[:, rows, :, here].set(v_rows.astype(v.dtype), mode="drop")
        return cache._replace(k=k, v=v)

    def write_slots(
        self,
        backend: AttentionBackend,
        cache: KVCache,
        k: Float["L B T G E"],
        v: Float["L B T G E"],
        index: Int[""] | IntB,
    ) -> KVCache:
        """`backend.write_slots` on the split cache: each device writes the slots it holds. A
        decode step (one key per row) goes through the backend's own write (the TPU's one-slot
        updates), a row whose slot another device holds given the slot past this device's piece,
        which every backend drops (a read of the old value instead makes the TPU compiler copy
        the whole cache every step); longer writes scatter, dropping the slots held elsewhere."""
        cache_spec = self.cache_specs(cache.k.shape[2])
        heads = cache_spec.k[2]
        b, t = k.shape[1], k.shape[2]
        n_local = self.local

        def local(cache, k, v, index):  # this device's slots
            row_index = jnp.broadcast_to(jnp.asarray(index, jnp.int32), (b,))
            rows = jnp.arange(b, dtype=jnp.int32)[:, None]  # [B, 1]
            if t == 1:  # a slot held elsewhere: past this piece, which every backend drops
                here = row_index - self._device() * n_local
                inside = (here >= 0) & (here < n_local)  # [B]
                at = jnp.where(inside, here, n_local)
                written = backend.write_slots(cache, k, v, at)  # one device's slots: no mesh
                return written.k, written.v
            slots = row_index[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]  # [B, T]
            k_rows = jnp.transpose(k, (1, 2, 0, 3, 4))  # [B, T, L, G, E]
            v_rows = jnp.transpose(v, (1, 2, 0, 3, 4))
            written = self._put(cache, k_rows, v_rows, rows, slots)
            return written.k, written.v

        new = P(None, None, None, heads, None)
        args, specs = (cache, k, v, index), (cache_spec, new, new, P())
        out = (cache_spec.k, cache_spec.v)
        keys, values = shard_map_given(local, self.mesh, args, specs, out)
        return cache._replace(k=keys, v=values)

    def install(
        self,
        cache: KVCache,
        k_new: Float["L U P G E"],
        v_new: Float["L U P G E"],
        dst: IntR,
        src: IntR,
        start: Int[""],
        prefix: KVCache | None = None,
        *,
        chunk: int = 0,
    ) -> KVCache:
        """`cache` with engine rows `dst` <- the prefix's slots [0, S') (`prefix`: one row, its k
        [L, 1, G, E, S'] and v [L, 1, G, S', E], replicated) and then prompt src[r]'s
        keys/values at slots [start, start + P) (module docstring: the pieces go round); its
        flags as given (the caller writes them: whole on every device). dst = B entries and
        slots past C are dropped. `chunk` > 0: the prompts' tokens come in the zig-zag device
        order of their token split (`attention.sequence`: device d holds chunks d and
        2n - 1 - d of `chunk` tokens), each device's piece its own two chunks."""
        cache_spec = self.cache_specs(cache.k.shape[2])
        heads = cache_spec.k[2]
        n, axes = self.ways, self.axes
        p = k_new.shape[2]
        pieces = p % n == 0 or chunk > 0
        width = p // n if pieces else p

        def local(cache, k_new, v_new, dst, src, start, prefix):
            rows = dst[:, None]
            if prefix is not None:  # the prefix: its slots into every admitted row
                k_pre, v_pre = prefix.k, prefix.v
                sp, r = k_pre.shape[4], dst.shape[0]
                lead = (r, sp, k_pre.shape[0], k_pre.shape[2])  # [R, S, L, G]
                k_rows = jnp.broadcast_to(
                    jnp.transpose(k_pre[:, 0], (3, 0, 1, 2))[None], (*lead, k_pre.shape[3])
                )  # [L, G, E, S] -> [R, S, L, G, E]
                v_rows = jnp.broadcast_to(
                    jnp.transpose(v_pre[:, 0], (2, 0, 1, 3))[None], (*lead, v_pre.shape[4])
                )
                slots = jnp.arange(sp, dtype=jnp.int32)[None, :]
                cache = self._put(cache, k_rows, v_rows, rows, slots)
            device = self._device()

            def one_layer(layer, cache):  # a layer's pieces go round: two in memory at a time
                k_piece = jax.lax.dynamic_index_in_dim(k_new, layer, 0, keepdims=False)
                v_piece = jax.lax.dynamic_index_in_dim(v_new, layer, 0, keepdims=False)
                for step in range(n if pieces else 1):
                    if step:  # the piece of device d - step arrives
                        perm = [(i, (i + 1) % n) for i in range(n)]
                        k_piece = jax.lax.ppermute(k_piece, axes, perm)
                        v_piece = jax.lax.ppermute(v_piece, axes, perm)
                    owner = (device - step) % n if pieces else 0
                    if chunk:  # chunks owner and 2n - 1 - owner of the prompt
                        own = jnp.arange(chunk, dtype=jnp.int32)
                        tokens = jnp.concatenate(
                            [owner * chunk + own, (2 * n - 1 - owner) * chunk + own]
                        )
                    else:
                        tokens = owner * width + jnp.arange(width, dtype=jnp.int32)
                    slots = (jnp.asarray(start, jnp.int32) + tokens)[None, :]  # a piece's
                    k_rows = jnp.take(k_piece, src, axis=0)[:, :, None]  # R, piece, 1, G, E
                    v_rows = jnp.take(v_piece, src, axis=0)[:, :, None]
                    cache = self._put(cache, k_rows, v_rows, rows, slots, layer=layer)
                return cache

            cache = jax.lax.fori_loop(0, k_new.shape[0], one_layer, cache)
            return cache.k, cache.v

        if prefix is None or not prefix.k.shape[4]:  # no prefix slots to write
            prefix = None
        new = P(None, None, batch_entry(self.mesh) if pieces else None, heads, None)
        pre = P(None, None, heads, None, None)
        args = (cache, k_new, v_new, dst, src, start, prefix)
        specs = (cache_spec, new, new, P(), P(), P(), KVCache(pre, pre, P(), P()))
        out = (cache_spec.k, cache_spec.v)
        keys, values = shard_map_given(local, self.mesh, args, specs, out)
        return cache._replace(k=keys, v=values)
