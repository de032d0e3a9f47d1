"""The `cpu` backend: XLA:CPU with the fused C++ custom calls (`jaxeval.ops.attention.cpu`, built
from `cpu_attention.cc` on first use) for float32 operands, the reference for the rest.

    packed       float32 whole rows: `cpu.cpu_packed` (any T, no padding to a block); else (a
                 device's query blocks under sequence parallelism, other dtypes) the reference
    cache_state  a float32 decode step (`is_decode_step`): `cpu.cpu_decode_state`, each row's
                 written slots read once; else (a prefill, a shared prefix) the reference's loop
    write_slots  the reference's

Both kernels keep the reference's online softmax over the same keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from jaxeval.models.attention import reference
from jaxeval.models.attention.backend import block_rule, is_decode_step
from jaxeval.ops.attention import cpu as cpu_kernels


def _float32(*xs: Any) -> bool:
    return all(str(x.dtype) == "float32" for x in xs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuAttention:
    """The fused CPU kernels (`AttentionBackend`); blocks as the reference's (`XlaAttention`)."""

    name: str = "cpu"
    min_length: int = 128
    max_block: int = 512
    cache_block: int = 128  # the reference's cache blocks, for calls the kernel does not take

    def block_size(self, length: int, block: int | None = None) -> int:
        return block_rule(length, block, min_length=self.min_length, max_block=self.max_block)

    def packed(self, q, k, v, mask, *, scale, softcap, block, init, q_blocks=None, mesh=None):
        if q_blocks is not None or not _float32(q, k, v):
            return reference.blocked_attend(
                q, k, v, mask, scale=scale, softcap=softcap, block=block, init=init,
                q_blocks=q_blocks,
            )  # fmt: skip
        if init is None:
            b, t, h, e = q.shape
            g = k.shape[2]
            init = reference.online_init((b, g, h // g, t), e)
        return cpu_kernels.cpu_packed(q, k, v, mask, scale=scale, softcap=softcap, init=init)

    def cache_state(self, q, cache, layer, q_positions, index, *, window, scale, softcap,
                    mesh=None):  # fmt: skip
        if not (is_decode_step(q, cache) and _float32(q, cache.k, cache.v)):
            return reference.cache_state(
                q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap,
                block=self.cache_block,
            )  # fmt: skip
        bound = jnp.broadcast_to(jnp.asarray(index, jnp.int32), q.shape[:1])  # [B]
        state = cpu_kernels.cpu_decode_state(
            reference.merged_queries(q, cache.k.shape[2]), cache, layer, bound,
            q_positions[:, 0], window, scale, softcap,
        )  # fmt: skip
        return reference.split_state(state, 1)

    def write_slots(self, cache, k, v, index, *, mesh=None):
        return reference.write_slots(cache, k, v, index)


CPU = CpuAttention()


def register_custom_calls(targets: Any) -> None:
    """Registers (building first, once per machine) the kernels among the custom-call `targets` of
    a program that is loaded without being traced (`jaxeval.lm.executable_store`)."""
    if set(targets) & {cpu_kernels.TARGET, cpu_kernels.PACKED_TARGET}:
        cpu_kernels.require()
