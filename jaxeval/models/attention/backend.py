"""`AttentionBackend`: the one seam between the decoder and a platform's attention kernels.

The decoder (`jaxeval.models.decoder`) names no platform. It holds a backend (`Runtime.attention`,
chosen once per model by `select_attention`) and asks it for its block sizes and for the four
things a platform may do its own way:

    block_size(T, override)   the query/key block of a packed row of T tokens (0: dense scores)
    cache_block               cache slots per block when a call reads the KV cache
    packed(q, k, v, mask, *, scale, softcap, block, init, q_blocks, mesh)
                              a packed row's attention under `mask` (`Mask`), its online softmax
                              continuing from `init` (scoring rows; a prefill's own keys); with
                              `q_blocks`, only those query blocks of the row (a device's share
                              under sequence parallelism)
    cache_state(q, cache, layer, q_positions, index, *, window, scale, softcap, mesh)
                              the online-softmax state of T queries over layer `layer` of the
                              cache's slots before `index` (a decode step: each row's written
                              slots)
    write_slots(cache, k, v, index, *, mesh)
                              the cache with this call's keys and values at `index`

The cache travels as one `KVCache` (`models.contract`: k, v and the slots' valid flags and
positions), never as loose arrays: a backend reads the bookkeeping it needs from it. `mesh` is the devices the operands are spread over (`Runtime.rows_mesh`, the runtime's mesh;
None: one device's arrays, e.g. inside a `jax.shard_map`): a backend that shards its kernels
itself (`tpu`) runs them over it, the others ignore it. No backend holds a mesh of its own.

Every method is total: every backend answers every call. A backend whose kernel does not apply to
some operands (a dtype, a layout, a prefill) calls the reference function for them itself
(`reference.blocked_attend`, `reference.cache_state`, `reference.write_slots`), so the decoder
never asks twice. Every backend computes the same rule (`Mask`) and the same numbers as the
reference up to float32 summation order. The KV cache layout is the contract's
(`models.contract.KVCache`), shared by all backends, because kernels move rows and slots.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from jax.sharding import Mesh

from jaxeval.models.contract import KVCache
from jaxeval.ops.attention.mask import Mask, State
from jaxeval.shapes import Float, Int, pow2_at_most

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters
IntAq = Int["Aq"]


@runtime_checkable
class AttentionBackend(Protocol):
    """How one platform computes attention (module docstring). Frozen and hashable: a field of the
    static `Runtime`, so part of every executable's key."""

    name: str  # what `model_info()["attention"]` reports
    cache_block: int

    def block_size(self, length: int, block: int | None = None) -> int:
        """The query/key block at row length T = `length`; 0 = the dense path. `block` overrides
        the rule: 0 = dense, Q > 0 = blocks of Q when T > Q."""
        ...

    def packed(
        self,
        q: Float["B T H E"],
        k: Float["B T G E"],
        v: Float["B T G E"],
        mask: Mask,
        *,
        scale: Float[""],
        softcap: float | None,
        block: int,
        init: State | None,
        q_blocks: IntAq | None = None,
        mesh: Mesh | None = None,
    ) -> Float["B T H E"]:
        """`reference.blocked_attend`'s output: packed rows under `mask`, the online softmax
        starting from `init` (None: no keys seen), in blocks of `block` where blocks apply.
        `q_blocks`: q holds only these blocks of the row, k, v and `mask` the whole row (one
        device's queries under sequence parallelism, `attention.sequence`)."""
        ...

    def cache_state(
        self,
        q: Float["B T H E"],
        cache: KVCache,
        layer: Int[""],
        q_positions: Int["B T"],
        index: Int[""] | IntB,
        *,
        window: Int[""] | None,
        scale: Float[""],
        softcap: float | None,
        mesh: Mesh | None = None,
    ) -> State:
        """`reference.cache_state`: the online-softmax state ([B, G, X, T]) of the T queries at
        slots [index, index + T) over layer `layer`'s valid slots before each row's index."""
        ...

    def write_slots(
        self,
        cache: KVCache,
        k: Float["L B T G E"],
        v: Float["L B T G E"],
        index: Int[""] | IntB,
        *,
        mesh: Mesh | None = None,
    ) -> KVCache:
        """`reference.write_slots`: the cache with k, v at slots [index, index + T) of every row
        (slots past C dropped)."""
        ...


def block_rule(
    length: int, block: int | None, *, min_length: int, max_block: int, min_block: int = 0
) -> int:
    """A backend's `block_size`: `block` when given (0 or >= T: dense), else 0 below `min_length`
    tokens, else the largest power of two <= T/4, between `min_block` and `max_block`."""
    if block is not None:
        return block if 0 < block < length else 0
    if length < min_length:
        return 0
    return max(min_block, min(max_block, pow2_at_most(length // 4)))


def is_decode_step(q: Float["B T H E"], cache: KVCache) -> bool:
    """Whether `cache_state` is a decode step a decode kernel takes: one query per row, a cache of
    slots with one row per query row (a shared prefix's single row is read by every query row
    through the reference instead)."""
    return q.shape[1] == 1 and cache.k.shape[1] == q.shape[0] and cache.k.shape[4] > 0
