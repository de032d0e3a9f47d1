"""Attention backends: the one seam between the decoder and a platform's attention kernels.

    backend = select_attention(mesh)                    # once per model: "auto" -> cpu or xla
    spec = dataclasses.replace(spec, attention=backend)  # a field of the static spec: in every
                                                         # jit key, never read from the environment
                                                         # while a function is traced

The decoder (`jaxeval.models.decoder`, `jaxeval.models.attention`) knows no platform. It asks its
spec's backend for the block sizes and for the two call kinds a platform may implement its own way:

    block_size(T, override)  the query/key block of a packed row of T tokens (0: dense scores)
    cache_block              cache slots per block when a call reads the KV cache
    packed(q, k, v, segment, parent, positions, *, window, scale, softcap, block, init)
                             a packed row's attention under the segment/parent rule, its online
                             softmax continuing from `init` (scoring rows, a prefill's own keys)
    cache_state(qm, k_cache, v_cache, layer, row_index, slot_valid, slot_positions, q_pos,
                window, scale, softcap)
                             a one-token decode step's online-softmax state over each row's
                             written cache slots, or None: then `cache_attend` walks the cache
                             blocks itself (the reference)

Every backend computes the same rule (`attention` module docstring) and differs from the reference
only in float32 summation order. The KV cache layout is the contract's (`models.contract.KVCache`),
shared by all backends, because kernels move rows and slots between caches.

Members:

    xla   the reference, on every platform: XLA's block loops (`attention.blocked_attend`,
          `cache_attend`'s loop over cache blocks)
    cpu   XLA:CPU with the fused C++ custom calls of `cpu_attention.cc` for float32 operands,
          the reference for other dtypes
    tpu   Pallas TPU kernels (`tpu_packed`: packed rows with block skipping; `tpu_decode`: a
          decode step reading each row's cache blocks up to its length), any dtype; on a mesh
          that is not on TPUs they run in Pallas's interpret mode (tests)
    gpu   `jax.nn.dot_product_attention` (cuDNN) for packed rows where it applies exactly
          (`gpu_attention.fits`), the reference elsewhere

Choice (`select_attention`): the `setting` argument (`--model_args attention=...`), else the
environment variable `JAXEVAL_ATTENTION`, else `auto`; `auto` takes `tpu` on a mesh of TPUs, `gpu`
on a mesh of GPUs, `cpu` when the mesh is one CPU device and a C++ compiler builds the kernels (a
sharded step would gather the kernel's operands), else `xla`. The platform is the mesh's, not the
process's default backend, so a model placed on a TPU topology from a CPU host (`jaxeval plan
--topology`) gets the real TPU kernels.

`JAXEVAL_CPU_ATTENTION=on|off|auto`, the older switch, is still read when `JAXEVAL_ATTENTION` is
unset (`on` forces `cpu`, `off` forces `xla`).

Sharding: the kernels see one device's rows and heads. Under a mesh of several devices each call
runs inside `jax.shard_map` over the batch axes (rows) and `model` (kv heads, when they divide),
so the partitioner never has to split a custom call.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models import attention as attn
from jaxeval.models import cpu_attention
from jaxeval.models.sharding import logical_sharding
from jaxeval.platform.mesh import rows_axis
from jaxeval.shapes import Float, Int, pow2_at_most

ENV = "JAXEVAL_ATTENTION"
SETTINGS = ("auto", "xla", "cpu", "tpu", "gpu")
_LEGACY = {"on": "cpu", "off": "xla", "auto": "auto"}  # JAXEVAL_CPU_ATTENTION's values


@dataclasses.dataclass(frozen=True, kw_only=True)
class XlaAttention:
    """The reference backend: XLA's own loops, any platform and dtype.

    Rows of T >= `blocked_min_length` attend block by block, in blocks of the largest power of two
    <= T/4 (at most `max_block`); shorter rows use the dense [B, G, X, T, T] scores. Chosen by
    timing `hidden` at SmolLM2-135M's shapes on the 2-core CPU, 8,192 tokens a call: the dense
    scores cost more than the skipped blocks save from T = 128 on, and a small block's loop
    overhead shows from T = 1,024 on (docs/performance.md).

        T   64  128  256  384  512  1,024  1,536  2,048  8,192
        Q    0   32   64   64  128    256    256    512    512
    """

    name: str = "xla"
    blocked_min_length: int = 128
    max_block: int = 512
    cache_block: int = 128  # cache slots per block of `attention.cache_attend`

    def block_size(self, length: int, block: int | None = None) -> int:
        """The query/key block at row length T = `length`; 0 = the dense path. `block` overrides
        the rule: 0 = dense, Q > 0 = blocks of Q when T > Q."""
        if block is not None:
            return block if 0 < block < length else 0
        if length < self.blocked_min_length:
            return 0
        return min(self.max_block, pow2_at_most(length // 4))

    def packed(self, q, k, v, segment, parent, positions, *, window, scale, softcap, block, init):
        """`attention.blocked_attend`: packed rows (or a prefill's own keys after `init`)."""
        return attn.blocked_attend(
            q, k, v, segment, parent, positions,
            window=window, scale=scale, softcap=softcap, block=block, init=init,
        )  # fmt: skip

    def cache_state(self, qm, k_cache, v_cache, layer, row_index, valid, slot_pos, q_pos, window,
                    scale, softcap):  # fmt: skip
        """None: `cache_attend` walks the cache blocks itself."""
        return None

    def write_slots(self, k_cache, v_cache, k, v, index):
        """None: `decoder.forward_cached` writes a decode step's keys and values (one slot per row
        at `index`) with one scatter."""
        return None


def _float32(*xs: Any) -> bool:
    return all(str(x.dtype) == "float32" for x in xs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuKernelAttention(XlaAttention):
    """XLA:CPU with the fused kernels of `cpu_attention.cc` (float32; other dtypes: the reference).

    The packed kernel takes any T (no padding to a block); the decode kernel reads each row's
    written slots once. Both keep the reference's online softmax over the same keys.
    """

    name: str = "cpu"

    def packed(self, q, k, v, segment, parent, positions, *, window, scale, softcap, block, init):
        if not _float32(q, k, v):
            return super().packed(
                q, k, v, segment, parent, positions,
                window=window, scale=scale, softcap=softcap, block=block, init=init,
            )  # fmt: skip
        if init is None:
            b, t, h, e = q.shape
            g = k.shape[2]
            init = attn.online_init((b, g, h // g, t), e)
        return cpu_attention.packed(
            q, k, v, segment, parent, positions, window, scale, softcap, init
        )

    def cache_state(self, qm, k_cache, v_cache, layer, row_index, valid, slot_pos, q_pos, window,
                    scale, softcap):  # fmt: skip
        if not _float32(qm, k_cache, v_cache):
            return None
        return cpu_attention.cache_state(
            qm, k_cache, v_cache, layer, row_index, valid, slot_pos, q_pos, window, scale, softcap
        )


def _one_head_dim(*xs: Any) -> bool:
    """q, k and v share one head dim (the Pallas kernels' layout; MLA's values differ)."""
    return len({x.shape[-1] for x in xs}) == 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpuAttention(XlaAttention):
    """Pallas TPU kernels for packed rows and decode steps (module docstring); rows shorter than
    `min_length` keep the dense scores. Blocks are multiples of 128 (the TPU lane width)."""

    name: str = "tpu"
    min_length: int = 128
    max_block: int = 512
    cache_block: int = 512
    interpret: bool = False  # Pallas interpret mode: a mesh not on TPUs
    mesh: Any = None  # the model's mesh: calls run under shard_map over it when it has >1 device

    def block_size(self, length: int, block: int | None = None) -> int:
        if block is not None:
            return block if 0 < block < length else 0
        if length < self.min_length:
            return 0
        return max(128, min(self.max_block, pow2_at_most(length // 4)))

    def packed(self, q, k, v, segment, parent, positions, *, window, scale, softcap, block, init):
        if not _one_head_dim(q, k, v):  # latent attention's value heads: the reference
            return super().packed(
                q, k, v, segment, parent, positions,
                window=window, scale=scale, softcap=softcap, block=block, init=init,
            )  # fmt: skip
        from jaxeval.models import tpu_packed  # Pallas: imported when a TPU model first traces

        x = q.shape[2] // k.shape[2]  # query heads per kv head

        def call(q, k, v, segment, parent, positions, init, window, scale):
            return tpu_packed.packed_attention(
                q, k, v, segment, parent, positions, window=window, scale=scale,
                softcap=softcap, block=tpu_packed.fit_block(max(128, block), x), init=init,
                interpret=self.interpret,
            )  # fmt: skip

        # rows at dimension 0 everywhere; kv heads: q/k/v [B, T, H|G, E] at 2, init [B, G, ...] at 1
        return sharded_call(
            self.mesh, call, (q, k, v, segment, parent, positions, init), (window, scale),
            heads=(2, 2, 2, None, None, None, 1), out_heads=2, kv_heads=k.shape[2],
        )  # fmt: skip

    def cache_state(self, qm, k_cache, v_cache, layer, row_index, valid, slot_pos, q_pos, window,
                    scale, softcap):  # fmt: skip
        if not qm.shape[-1] == k_cache.shape[3] == v_cache.shape[-1]:  # k_cache [L, B, G, E, C]
            return None
        from jaxeval.models import tpu_decode  # Pallas: imported when a TPU model first traces

        def call(qm, k_cache, v_cache, row_index, valid, slot_pos, q_pos, layer, window, scale):
            return tpu_decode.decode_state(
                qm, k_cache, v_cache, layer, row_index, valid, slot_pos, q_pos, window, scale,
                softcap, block=self.cache_block, interpret=self.interpret,
            )  # fmt: skip

        # the cache [L, B, G, ...] has rows at 1; qm [B, G, X*T, E] and the state at 0 and 1
        return sharded_call(
            self.mesh, call, (qm, k_cache, v_cache, row_index, valid, slot_pos, q_pos),
            (layer, window, scale), heads=(1, 2, 2, None, None, None, None), out_heads=1,
            kv_heads=k_cache.shape[2], rows=(0, 1, 1, 0, 0, 0, 0),
        )  # fmt: skip

    def write_slots(self, k_cache, v_cache, k, v, index):
        """Each device writes its own rows' slots with one-slot `dynamic_update_slice`s
        (`write_row_slots`), under `jax.shard_map` on a mesh."""
        # k_cache [L, B, G, E, C], v_cache [L, B, G, C, E], k, v [L, B, 1, G, E], index [B]
        return sharded_call(
            self.mesh, write_row_slots, (k_cache, v_cache, k, v, index), (),
            heads=(2, 2, 3, 3, None), out_heads=2, kv_heads=k_cache.shape[2],
            rows=(1, 1, 1, 1, 0), out_rows=1,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuAttention(XlaAttention):
    """Packed rows through `jax.nn.dot_product_attention` where `gpu_attention.fits` (cuDNN's
    flash attention on NVIDIA GPUs), XLA's loops elsewhere."""

    name: str = "gpu"
    implementation: str | None = None  # None: cuDNN when it applies; "xla" in CPU tests

    def packed(self, q, k, v, segment, parent, positions, *, window, scale, softcap, block, init):
        from jaxeval.models import gpu_attention  # imported when a GPU model first traces

        return gpu_attention.gpu_packed(
            q, k, v, segment, parent, positions, window=window, scale=scale, softcap=softcap,
            block=block, init=init, implementation=self.implementation,
        )  # fmt: skip


def write_row_slots(
    k_cache: Float["L B G E C"],
    v_cache: Float["L B G C E"],
    k: Float["L B 1 G E"],
    v: Float["L B 1 G E"],
    index: Int[B],  # noqa: F821 (a dimension name)
) -> tuple[jax.Array, jax.Array]:
    """k_cache[:, r, :, :, index[r]] <- k[:, r, 0] for every row r (index >= C: dropped), as B
    `dynamic_update_slice`s of one slot in a loop over one device's rows. The scatter that writes
    all rows at once makes the TPU compiler pick a layout of its own for the whole cache and copy
    the cache into it and back on every decode step (four copies of the cache per step at
    SmolLM2's shapes on a v5e-8); a one-slot update keeps the cache's layout and touches
    L * G * E values per row. (Under the SPMD partitioner a loop over the rows of a sharded cache
    would gather the cache: hence `TpuAttention.write_slots` runs it under `jax.shard_map`.)"""
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


def sharded_call(mesh, fn, args, scalars, *, heads, out_heads, kv_heads, rows=None, out_rows=0):
    """`fn(*args, *scalars)` on each device's rows and kv heads of `mesh` (`jax.shard_map`), or
    plainly on a mesh of one device (or none).

    `args` are arrays, tuples of arrays or None, `rows[i]` / `heads[i]` their row and kv-head
    dimensions (default rows: 0; None: the argument has none); `scalars` (None or 0-d) are
    replicated. The outputs (one array or a tuple) have rows at `out_rows` and kv heads at
    `out_heads`.
    Rows split over the batch axes when every row count divides by their devices (else each
    device computes all rows: a call on one admitted prompt); kv heads over `model` when they
    divide it, else every device of the axis computes all heads (the result is the same).
    """
    if mesh is None or mesh.devices.size == 1:
        return fn(*args, *scalars)
    from jax.sharding import PartitionSpec as P

    rows = rows or (0,) * len(args)
    # the batch rule (`mesh.rows_axis`) for every argument's rows, or none of them split (e.g. one
    # admitted prompt: every device has it all)
    splits = [
        rows_axis(mesh, leaf.shape[r])
        for x, r in zip(args, rows)
        if x is not None and r is not None
        for leaf in jax.tree.leaves(x)
    ]
    batch = splits[0] if splits and None not in splits else None
    # the kv heads' axis, from the rule table (None when they do not divide it)
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
        jax.tree.map(lambda x, r=r, h=h: part(x.ndim, r, h), x)
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


XLA = XlaAttention()
CPU = CpuKernelAttention()


def requested(setting: str | None = None) -> str:
    """The setting in force: `setting`, else `JAXEVAL_ATTENTION`, else `JAXEVAL_CPU_ATTENTION`
    (mapped), else "auto"."""
    if setting is None:
        setting = os.environ.get(ENV)
        if setting is None and os.environ.get(cpu_attention.ENV) is not None:
            legacy = cpu_attention.mode()  # raises on an unknown value, naming the variable
            setting = _LEGACY[legacy]
    value = (setting or "auto").strip().lower()
    if value not in SETTINGS:
        raise JaxevalError(
            f"attention={value!r} is not one of {', '.join(SETTINGS)}",
            field="attention",
            hint=f"set --model_args attention=... or {ENV} to one of {', '.join(SETTINGS)}",
        )
    return value


def select_attention(mesh: Mesh | None, setting: str | None = None) -> XlaAttention:
    """The backend for a model on `mesh` (module docstring). `cpu` asked for on a mesh that is not
    on the CPU, or without a compiler to build the kernels, is an error naming the fix."""
    value = requested(setting)
    devices = list(mesh.devices.flat) if mesh is not None else []
    platforms = {d.platform for d in devices}
    on_cpu = bool(devices) and platforms == {"cpu"}
    if value == "auto":
        if platforms == {"tpu"}:
            value = "tpu"
        elif platforms == {"gpu"} or platforms == {"cuda"} or platforms == {"rocm"}:
            value = "gpu"
        elif on_cpu and len(devices) == 1 and cpu_attention.available():
            value = "cpu"
        else:
            value = "xla"
    if value == "xla":
        return XLA
    if value == "tpu":
        many = mesh if len(devices) > 1 else None
        return TpuAttention(interpret=platforms != {"tpu"}, mesh=many)
    if value == "gpu":
        return GpuAttention(implementation=None if platforms - {"cpu"} else "xla")
    if not on_cpu:
        raise JaxevalError(
            f"attention=cpu needs a mesh of CPU devices, this one is on {', '.join(sorted(platforms))}",
            field="attention",
            hint="use attention=auto (or xla)",
        )
    if not cpu_attention.available():
        raise JaxevalError(
            f"attention=cpu but the CPU attention kernels could not be built: "
            f"{cpu_attention.build_error()}",
            field="attention",
            hint="install a C++ compiler (or set CXX), or use attention=auto to fall back to XLA",
        )
    return CPU
