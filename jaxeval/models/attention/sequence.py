"""Sequence parallelism: the tokens of rows that cannot split over the devices split instead.

    split = sequence_split(mesh, rows=B, length=T, block=Q)   # None: the rows split as usual
    tokens = split.permute(tokens)          # token order -> device order (axis 1)
    x = split.constrain(x)                  # each device holds its own two chunks
    out = split.attend(backend, q, k, v, mask, scale=..., softcap=..., sinks=None)
    x = split.restore(x)                    # device order -> token order

**When.** A call whose B rows do not divide over the batch axes (`platform.mesh.rows_axis`: one
long prompt, or 3 rows on 8 devices) would run replicated, every device computing every token.
Its T tokens split over those devices instead, when T cuts into 2n chunks of whole attention
blocks of at least `MIN_BLOCK` tokens (n: the batch axes' devices; `sequence_split`).

**Balance.** A causal query's cost grows with its index, so the row is cut into 2n chunks and
device d holds chunks d and 2n-1-d (zig-zag): every device visits the same number of key blocks
of a causal row.

    2n = 8 chunks, n = 4:   device 0: chunks 0, 7   device 1: 1, 6   device 2: 2, 5   device 3: 3, 4
    device order:           0 7 | 1 6 | 2 5 | 3 4

**What moves.** Everything a layer does token by token (projections, norms, rotary on each
token's position, the MLP, the experts) runs on the device's own tokens. Attention needs every
key: inside `jax.shard_map`, each device all-gathers the layer's keys and values over the batch
axes (the whole row's [B, T, G, E], once per layer), puts them back in token order, and attends
its own query blocks against them (`AttentionBackend.packed` with `q_blocks`: the Pallas kernel
on a TPU, the reference elsewhere). Query and kv heads split over `model` as the parameters'
rule puts the kv heads (`models.sharding.logical_sharding`). The mask (segment, parent,
positions: [B, T] integers) is read whole, in token order, by every device.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxeval.models.attention import reference
from jaxeval.models.attention.backend import AttentionBackend
from jaxeval.ops.attention.mask import Mask, State
from jaxeval.platform.mesh import batch_axes, batch_entry, batch_shards, constrain_rows, rows_axis
from jaxeval.shapes import Float

MIN_BLOCK = 128  # tokens per attention block of a split row at least (a TPU lane width)


def tokens_split(length: int, ways: int) -> bool:
    """Whether rows of T = `length` tokens can split over `ways` (n) batch devices: 2n chunks of
    whole `MIN_BLOCK`-token blocks (what `sequence_split` asks of a row, besides a blocked
    attention). The scoring grid lets such rows come fewer than n to a batch
    (`lm.score.buckets`)."""
    return ways > 1 and length % (2 * ways * MIN_BLOCK) == 0


def sequence_split(mesh: Mesh | None, *, rows: int, length: int, block: int) -> Split | None:
    """The split of B = `rows` rows of T = `length` tokens attended in blocks of Q = `block` on
    `mesh` (module docstring), or None: no mesh of several batch devices, the rows divide over
    them, a dense row (`block` 0), or T does not cut into 2n chunks of whole blocks of at least
    `MIN_BLOCK` tokens. The split's block is the largest divisor of the chunk <= `block`."""
    if mesh is None or block <= 0 or not batch_axes(mesh):
        return None
    n = batch_shards(mesh)
    if rows_axis(mesh, rows) is not None or not tokens_split(length, n):
        return None
    q = math.gcd(length // (2 * n), block)
    if q < MIN_BLOCK:
        return None
    return Split(mesh=mesh, ways=n, length=length, block=q)


def shard_map_given(fn: Any, mesh: Mesh, args: tuple, specs: tuple, out_specs: Any) -> Any:
    """`jax.shard_map` of `fn(*args)` over the arguments that are not None (`fn` sees None in the
    places of the others; `specs` has an entry for every argument)."""
    present = [i for i, a in enumerate(args) if a is not None]

    def call(*given):
        full: list[Any] = [None] * len(args)
        for i, a in zip(present, given):
            full[i] = a
        return fn(*full)

    return jax.shard_map(
        call,
        mesh=mesh,
        in_specs=tuple(specs[i] for i in present),
        out_specs=out_specs,
        check_vma=False,
    )(*(args[i] for i in present))


@dataclasses.dataclass(frozen=True)
class Split:
    """T tokens in 2n chunks over the n devices of the batch axes (module docstring)."""

    mesh: Mesh
    ways: int  # n: the batch axes' devices
    length: int  # T
    block: int  # Q: attention blocks, a divisor of the chunk

    @property
    def chunk(self) -> int:
        return self.length // (2 * self.ways)

    @property
    def axes(self) -> tuple[str, ...]:
        return batch_axes(self.mesh)

    def permute(self, x: jax.Array, axis: int = 1) -> jax.Array:
        """Token order -> device order along `axis` (x [B, T, ...] by default)."""
        n, c = self.ways, self.chunk
        lead, rest = x.shape[:axis], x.shape[axis + 1 :]
        chunks = x.reshape(*lead, 2 * n, c, *rest)
        first = jax.lax.slice_in_dim(chunks, 0, n, axis=axis)
        second = jnp.flip(jax.lax.slice_in_dim(chunks, n, 2 * n, axis=axis), axis=axis)
        return jnp.stack([first, second], axis=axis + 1).reshape(x.shape)

    def restore(self, x: jax.Array, axis: int = 1) -> jax.Array:
        """Device order -> token order along `axis` (`permute`'s inverse)."""
        n, c = self.ways, self.chunk
        lead, rest = x.shape[:axis], x.shape[axis + 1 :]
        pairs = x.reshape(*lead, n, 2, c, *rest)
        first = jnp.take(pairs, 0, axis=axis + 1)
        second = jnp.flip(jnp.take(pairs, 1, axis=axis + 1), axis=axis)
        return jnp.concatenate([first, second], axis=axis).reshape(x.shape)

    def order(self) -> np.ndarray:
        """[T]: the token index at each place of the device order (what `permute` does)."""
        return np.asarray(self.permute(jnp.arange(self.length)[None]))[0]

    def constrain(self, x: jax.Array) -> jax.Array:
        """Inside a jitted kernel: x [B, T, ...] (device order) pinned with T over the batch axes
        (the batch rule applied to the tokens)."""
        return constrain_rows(x, self.mesh, row_dim=1)

    def query_blocks(self, device: jax.Array) -> jax.Array:
        """[Aq]: the row's attention blocks that `device` holds, in device order."""
        m = self.chunk // self.block
        own = jnp.arange(m, dtype=jnp.int32)
        first = device * m + own
        second = (2 * self.ways - 1 - device) * m + own
        return jnp.concatenate([first, second])

    def attend(
        self,
        backend: AttentionBackend,
        q: Float["B T H E"],
        k: Float["B T G E"],
        v: Float["B T G E"],
        mask: Mask,
        *,
        scale: jax.Array,
        softcap: float | None,
        sinks: jax.Array | None = None,
        init: State | None = None,
    ) -> Float["B T H E"]:
        """`backend.packed` of the whole row, q, k and v in device order, `mask` in token order;
        each device computes its own queries (module docstring). Returns device order. The
        queries start from `init` (a state over earlier keys, [B, G, X, T] in device order: a
        prefill's cached prefix), else from the `sinks` when given."""
        from jaxeval.models.sharding import logical_sharding  # the rule table imports this package

        heads = logical_sharding(self.mesh, ("kv_heads",), (k.shape[2],)).spec[0]
        axes, entry = self.axes, batch_entry(self.mesh)
        window = mask.window

        def local(q, k, v, segment, parent, positions, window, scale, sinks, init):
            device = jax.lax.axis_index(axes)
            k_all = self.restore(jax.lax.all_gather(k, axes, axis=1, tiled=True))
            v_all = self.restore(jax.lax.all_gather(v, axes, axis=1, tiled=True))
            if init is None and sinks is not None:  # every query starts from the sink
                b, t, h, e = q.shape
                g = k.shape[2]
                init = reference.fold_sinks(reference.online_init((b, g, h // g, t), e), sinks)
            return backend.packed(  # one device's arrays: no mesh
                q, k_all, v_all, Mask(segment, parent, positions, window),
                scale=scale, softcap=softcap, block=self.block, init=init,
                q_blocks=self.query_blocks(device),
            )  # fmt: skip

        spread = P(None, entry, heads, None)
        args = (q, k, v, mask.segment, mask.parent, mask.positions, window, scale, sinks, init)
        state = (
            P(None, heads, None, entry),
            P(None, heads, None, entry),
            P(None, heads, None, entry, None),
        )
        specs = (spread, spread, spread, P(), P(), P(), P(), P(), P(heads), state)
        return shard_map_given(local, self.mesh, args, specs, spread)
