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

Choice (`select_attention`): the `setting` argument (`--model_args attention=...`), else the
environment variable `JAXEVAL_ATTENTION`, else `auto`; `auto` takes `cpu` when the mesh is one CPU
device and a C++ compiler builds the kernels (a sharded step would gather the kernel's operands),
else `xla`. `JAXEVAL_CPU_ATTENTION=on|off|auto`, the older switch, is still read when
`JAXEVAL_ATTENTION` is unset (`on` forces `cpu`, `off` forces `xla`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models import attention as attn
from jaxeval.models import cpu_attention
from jaxeval.shapes import pow2_at_most

ENV = "JAXEVAL_ATTENTION"
SETTINGS = ("auto", "xla", "cpu")
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
            hint=f"set --model_args attention=... or {ENV} to auto, xla or cpu",
        )
    return value


def select_attention(mesh: Mesh | None, setting: str | None = None) -> XlaAttention:
    """The backend for a model on `mesh` (module docstring). `cpu` asked for on a mesh that is not
    on the CPU, or without a compiler to build the kernels, is an error naming the fix."""
    value = requested(setting)
    devices = list(mesh.devices.flat) if mesh is not None else []
    on_cpu = bool(devices) and all(d.platform == "cpu" for d in devices)
    if value == "xla":
        return XLA
    if value == "auto":
        if on_cpu and len(devices) == 1 and cpu_attention.available():
            return CPU
        return XLA
    if not on_cpu:
        platforms = sorted({d.platform for d in devices})
        raise JaxevalError(
            f"attention=cpu needs a mesh of CPU devices, this one is on {', '.join(platforms)}",
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
