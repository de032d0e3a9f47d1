"""The `xla` backend: the reference, XLA's own loops on any platform and dtype.

packed       `reference.blocked_attend` (block loops that skip invisible blocks)
cache_state  `reference.cache_state` (a loop over the written cache blocks)
write_slots  `reference.write_slots` (one scatter, or one `dynamic_update_slice`)
"""

from __future__ import annotations

import dataclasses

from jaxeval.models.attention import reference
from jaxeval.models.attention.backend import block_rule


@dataclasses.dataclass(frozen=True, kw_only=True)
class XlaAttention:
    """The reference backend (`AttentionBackend`).

    Rows of T >= `min_length` attend block by block, in blocks of the largest power of two
    <= T/4 (at most `max_block`); shorter rows use the dense [B, G, X, T, T] scores. Chosen by
    timing `hidden` at SmolLM2-135M's shapes on the 2-core CPU, 8,192 tokens a call: the dense
    scores cost more than the skipped blocks save from T = 128 on, and a small block's loop
    overhead shows from T = 1,024 on (docs/performance.md).

        T   64  128  256  384  512  1,024  1,536  2,048  8,192
        Q    0   32   64   64  128    256    256    512    512
    """

    name: str = "xla"
    min_length: int = 128
    max_block: int = 512
    cache_block: int = 128  # cache slots per block of `reference.cache_state`

    def block_size(self, length: int, block: int | None = None) -> int:
        return block_rule(length, block, min_length=self.min_length, max_block=self.max_block)

    def packed(self, q, k, v, mask, *, scale, softcap, block, init, q_blocks=None, mesh=None):
        return reference.blocked_attend(
            q, k, v, mask, scale=scale, softcap=softcap, block=block, init=init, q_blocks=q_blocks
        )

    def cache_state(self, q, cache, layer, q_positions, index, *, window, scale, softcap,
                    mesh=None):  # fmt: skip
        return reference.cache_state(
            q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap,
            block=self.cache_block,
        )  # fmt: skip

    def write_slots(self, cache, k, v, index, *, mesh=None):
        return reference.write_slots(cache, k, v, index)


XLA = XlaAttention()
