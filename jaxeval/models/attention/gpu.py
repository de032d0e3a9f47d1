"""The `gpu` backend: packed rows through `jax.nn.dot_product_attention` (cuDNN's flash attention on
NVIDIA GPUs: `jaxeval.ops.attention.gpu`) where it computes the rule exactly, the reference
elsewhere.

    packed       `gpu.gpu_packed` where `gpu.fits` (bfloat16/float16, no soft-cap, no earlier
                 state, one head dim: the table in `jaxeval.ops.attention.gpu`) on whole
                 rows; else (and a device's query blocks) the reference's `blocked_attend`
    cache_state  the reference's loop
    write_slots  the reference's
"""

from __future__ import annotations

import dataclasses

from jaxeval.models.attention import reference
from jaxeval.models.attention.backend import block_rule
from jaxeval.ops.attention import gpu as gpu_kernels


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuAttention:
    """cuDNN's fused attention for packed rows (`AttentionBackend`); blocks as the reference's."""

    name: str = "gpu"
    implementation: str | None = None  # None: cuDNN when it applies; "xla" in CPU tests
    min_length: int = 128
    max_block: int = 512
    cache_block: int = 128

    def block_size(self, length: int, block: int | None = None) -> int:
        return block_rule(length, block, min_length=self.min_length, max_block=self.max_block)

    def packed(self, q, k, v, mask, *, scale, softcap, block, init, q_blocks=None, mesh=None):
        how = gpu_kernels.implementation_for(self.implementation)
        platform = "gpu" if how == "cudnn" else "cpu"
        fits = gpu_kernels.fits(q, k, softcap=softcap, init=init, platform=platform, v=v)
        if q_blocks is not None or not fits:
            return reference.blocked_attend(
                q, k, v, mask, scale=scale, softcap=softcap, block=block, init=init,
                q_blocks=q_blocks,
            )  # fmt: skip
        return gpu_kernels.gpu_packed(q, k, v, mask, scale=scale, implementation=how)

    def cache_state(self, q, cache, layer, q_positions, index, *, window, scale, softcap,
                    mesh=None):  # fmt: skip
        return reference.cache_state(
            q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap,
            block=self.cache_block,
        )  # fmt: skip

    def write_slots(self, cache, k, v, index, *, mesh=None):
        return reference.write_slots(cache, k, v, index)
