"""Expert parallelism: each device of a mesh holds X/n of an MoE layer's experts and runs them on
every token routed to them; expert weights never move.

The experts dimension [Nx] of the expert weights is split over `expert_axes(mesh, Nx)`: the
mesh axes of `EXPERT_AXES` (fsdp, model) of more than one device whose product divides Nx (else
model alone, else fsdp alone, else none: the weights stay as the rule table's fallbacks put them
and the partitioner runs the layer). `jaxeval.models.sharding` applies the same choice to the
parameters, so the layer's `shard_map` finds each device's experts where they already are.

One layer on a device, n devices on the expert axes, the tokens' rows split over the batch axes:

    local experts   e0 = device index * X/n; assignment (t, k) is here iff e0 <= expert < e0 + X/n,
                    renumbered expert - e0, others X/n ("not here": the backend skips them)
    combine         the backend (`RaggedExperts`, `BlockedExperts`) on its X/n experts:
                    sum over the local K of weight * expert(x), float32, one row per token
    gather          over the expert axes that also split rows (fsdp, r devices), when the r
                    shards' assignments are small (`gather_bytes`: decode steps, short batches):
                    every row on every device (the call's input replicated over those axes, as
                    `decoder.weights_stay` already keeps a decode step's rows), one pass of the
                    backend over all of them, its float32 sums psum'd over every expert axis.
                    Each device reads its experts' weights once per call, which bounds a decode
                    step, and the rows come back as the dense layers around want them
    ring            the same axes, larger batches: each shard of rows travels round the r devices
                    with its float32 sum, each device adding its share, then the sum goes home:
                    r - 1 passes of the rows, r of the sums (the bytes of an all-gather and a
                    reduce-scatter), only one shard's assignments in memory at a time, and the
                    local experts' weights read once per pass
    psum            over the expert axes that do not split rows (model)

A pass over at most `dense_rows` rows (gathered: a decode step) runs every local expert on every
row (`dense`, `DenseExperts`: held x rows expert rows, a few milliseconds of FLOPs at
most) instead of the grouped backend: XLA's own matmuls read each layer's expert weights where
they lie in the stacked parameters, while a grouped-matmul kernel (`ragged_dot` on TPUs) takes
its operand as a buffer, so every step first copies the layer's expert weights out of the stack
(three times the weight bytes that bound the step).

Nothing is dropped (no capacity): a device's groups hold every assignment to its experts. Its
result is the single-device one up to the order of the float32 sum over the K (1e-6 relative).

X = 4 experts over n = 2 devices, Kx = 2, 3 tokens routed [[0, 3], [1, 2], [3, 1]]:

    device 0 (experts 0, 1)   local ids [[0, 2], [1, 2], [2, 1]]   (2 = not here)
    device 1 (experts 2, 3)   local ids [[2, 1], [2, 0], [1, 2]]
    token 0 = w00 expert_0(x0) (device 0) + w01 expert_3(x0) (device 1), summed by the psum
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from jaxeval.models.experts.backend import ExpertBackend
from jaxeval.models.experts.spec import EXPERT_KEYS
from jaxeval.platform.mesh import rows_axis
from jaxeval.shapes import Float, Int

EXPERT_AXES = ("fsdp", "model")  # the mesh axes the experts dimension may split over, in order
# Per device: the gathered rows' assignments (rows x K x (D + 2 Fx) activations, the backend's
# working set) at or under this run in one pass (`gather`), larger ones round the ring. Mixtral
# decoding 64 rows on 8 devices: 8 MiB; Qwen3-30B-A3B scoring 16,384 tokens: 940 MiB.
GATHER_BYTES = 256 << 20
# A pass over at most this many token rows runs every local expert on every row (module
# docstring): 64 rows x 3 D Fx x 2 FLOPs per expert stays under the time to read its 3 D Fx
# bf16 weights wherever a chip has 64 or more FLOPs per byte of HBM bandwidth (every TPU: v5e 240).
DENSE_ROWS = 64


def expert_axes(
    mesh: Any, num_experts: int, used: tuple[str, ...] = (), candidates=EXPERT_AXES
) -> tuple[str, ...]:
    """The mesh axes (in mesh order) an experts dimension of `num_experts` splits over on `mesh`
    (a `Mesh` or `AbstractMesh`): the `candidates` present with more than one device and not in
    `used` (taken by an earlier dimension of the same array), all of them when their product
    divides `num_experts`, else the largest single one that does, else none (module docstring).

        mesh {data 1, fsdp 2, model 4}, 8 experts  -> ("fsdp", "model")
        same mesh, 4 experts                        -> ("model",)
        mesh {data 2, fsdp 1, model 4}, 6 experts   -> ()
    """
    free = [a for a in mesh.axis_names if a in candidates and a not in used and mesh.shape[a] > 1]
    if free and num_experts % math.prod(mesh.shape[a] for a in free) == 0:
        return tuple(free)
    fits = [a for a in free if num_experts % mesh.shape[a] == 0]
    return (max(fits, key=lambda a: mesh.shape[a]),) if fits else ()


def local_ids(experts: Int["B*T Kx"], first: jax.Array | int, held: int) -> Int["B*T Kx"]:
    """Expert ids on the device holding experts [first, first + held): expert - first there,
    `held` ("not here") for the others (the module docstring's example)."""
    ids = experts - first
    return jnp.where((ids >= 0) & (ids < held), ids, held)


def _spec_entry(axes: tuple[str, ...]) -> Any:
    """A PartitionSpec entry for `axes`: None, one name, or the tuple."""
    return None if not axes else axes[0] if len(axes) == 1 else axes


def _device_index(axes: tuple[str, ...], mesh: Mesh) -> jax.Array:
    """Inside `shard_map`: this device's index along `axes` together (row-major, as
    PartitionSpec splits a dimension over several axes)."""
    index = jnp.zeros((), jnp.int32)
    for a in axes:
        index = index * mesh.shape[a] + jax.lax.axis_index(a)
    return index


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpertParallel:
    """The expert backend of a mesh of several devices: `inner` (ragged or blocked) run under
    `shard_map` on each device's X/n experts (module docstring) of the mesh each call is given
    (`mesh=`: the runtime's); where `expert_axes` finds no split, or no mesh is given, `inner`
    alone. `name` is the inner backend's."""

    inner: ExpertBackend  # RaggedExperts | BlockedExperts | DenseExperts
    gather_bytes: int = GATHER_BYTES  # the gather / ring threshold (module docstring)
    dense: ExpertBackend | None = None  # passes over at most `dense_rows` rows (DenseExperts)
    dense_rows: int = DENSE_ROWS

    @property
    def name(self) -> str:
        return self.inner.name

    def gathers(self, rows: int, moe, width: int, itemsize: int) -> bool:
        """Whether `rows` gathered token rows (all r shards) of `width` run in one pass: their
        assignments' activations, rows x K x (D + 2 Fx) x itemsize, within `gather_bytes`."""
        size = rows * moe.top_k * (width + 2 * moe.expert_size) * itemsize
        return size <= self.gather_bytes

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], *,
                moe, acc: Float["B*T D"] | None = None,
                mesh: Mesh | None = None) -> Float["B*T D"]:  # fmt: skip
        axes = () if mesh is None else expert_axes(mesh, moe.num_experts)
        if not axes:
            return self.inner.combine(p, x, experts, weights, moe=moe, acc=acc)
        held = moe.num_experts // math.prod(mesh.shape[a] for a in axes)
        rows = rows_axis(mesh, x.shape[0])
        row_axes = () if rows is None else (rows,) if isinstance(rows, str) else tuple(rows)
        gather = tuple(a for a in row_axes if a in axes)  # rows split over expert axes
        reduce = tuple(a for a in axes if a not in gather)  # expert axes holding every row
        stacked = {k: p[k] for k in EXPERT_KEYS if k in p}  # [Nx, ...] each
        expert_spec = {k: PartitionSpec(_spec_entry(axes)) for k in stacked}
        inner = self.inner
        ring = math.prod(mesh.shape[a] for a in gather)  # devices the rows travel round
        shift = [(i, (i + 1) % ring) for i in range(ring)]
        local_rows = x.shape[0] // math.prod(mesh.shape[a] for a in row_axes)
        at_once = bool(gather) and self.gathers(
            local_rows * ring, moe, x.shape[-1], x.dtype.itemsize
        )
        if at_once:  # every row on every expert device: split over the other row axes only
            row_spec = PartitionSpec(_spec_entry(tuple(a for a in row_axes if a not in gather)))
            reduce, gather = reduce + gather, ()
        else:
            row_spec = PartitionSpec(rows)
        passed = local_rows * ring if at_once else local_rows  # rows of one pass
        if self.dense is not None and passed <= self.dense_rows:
            inner = self.dense

        def local(p, x, experts, weights):
            first = _device_index(axes, mesh) * held

            def mine(x, experts, weights, acc=None):  # float32 [B*T, D]: one shard, our experts
                ids = local_ids(experts, first, held)
                return inner.combine(p, x, ids, weights, moe=moe, acc=acc)

            def step(_, carry):  # add this device's share, pass the rows on
                x, experts, weights, acc = carry
                acc = mine(x, experts, weights, acc)
                return tuple(jax.lax.ppermute(a, gather, shift) for a in (x, experts, weights, acc))

            if not gather:  # every row here (or gathered at the call: `at_once`)
                y = mine(x, experts, weights)
            else:  # ring - 1 passes, the last share, then the sums home
                acc = jnp.zeros(x.shape, jnp.float32)
                carry = jax.lax.fori_loop(
                    0, ring - 1, step, (x, experts, weights, acc), unroll=ring <= 8
                )
                y = jax.lax.ppermute(mine(*carry), gather, shift)
            return jax.lax.psum(y, reduce) if reduce else y

        out = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(expert_spec, row_spec, row_spec, row_spec),
            out_specs=row_spec,
            check_vma=False,
        )(stacked, x, experts, weights)
        return out if acc is None else acc + out
