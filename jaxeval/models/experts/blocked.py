"""`BlockedExperts`: each expert's group of assignments padded to a multiple of a block of m
rows; a loop over the used blocks only (dynamic trip count) runs one expert's whole MLP per
block. The choice off TPU, where `ragged_dot` runs every expert on every assignment.

Assignment layout, Nx = 3 experts, Kx = 1, m = 2, the experts of 5 tokens [2, 0, 2, 2, 0]:

    sorted by expert     tokens [1, 4 | 0, 2, 3]     group sizes [2, 0, 3]
    padded rows          [1, 4 | 0, 2 | 3, pad]      blocks of expert [0, 2, 2], 3 blocks used
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxeval.models.experts.reference import (
    accumulator,
    expert_mlp,
    experts_held,
    experts_of,
    sort_by_expert,
    weighted,
)
from jaxeval.shapes import Float, Int, pow2_at_most


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockedExperts:
    """Each expert's group of assignments padded to a multiple of `block` rows; a loop over the
    used blocks only, each running one expert's whole MLP (weights read by dynamic index).

    `block` None: `block_size`'s rule, m = the largest power of two <= B*T*K / (4 X), clamped to
    [8, 128]. The loop runs sum over experts of ceil(group / m) blocks (`max_blocks` bounds it):
    padding adds under X m rows, a quarter of the B*T*K assignments where the clamp does not bind
    (Qwen3-30B-A3B, 2,048 tokens: m = 32, at most 1.24 times the active rows; 1.28 times the
    active FLOPs with the router and the activations, tests/models/test_moe.py). Small batches
    (decoding) clamp to m = 8: each used expert's weights are read once, which bounds those steps
    anyway.
    """

    name: str = "blocked"
    block: int | None = None
    min_block: int = 8
    max_block: int = 128

    def __post_init__(self):
        if self.block is not None and self.block < 1:
            raise ValueError(f"block must be positive, got {self.block}")

    def block_size(self, assignments: int, num_experts: int) -> int:
        """Rows per block for `assignments` = B*T*K over `num_experts` = X (class docstring)."""
        if self.block is not None:
            return self.block
        rule = pow2_at_most(max(1, assignments // (4 * num_experts)))
        return max(self.min_block, min(self.max_block, rule))

    def max_blocks(self, assignments: int, num_experts: int) -> int:
        """The static bound on the loop's trip count: sum over the (at most min(X, B*T*K))
        non-empty groups of ceil(group / m) <= (B*T*K + min(X, B*T*K) (m - 1)) / m."""
        m = self.block_size(assignments, num_experts)
        return (assignments + min(num_experts, assignments) * (m - 1)) // m

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], *,
                moe, acc: Float["B*T D"] | None = None, mesh=None) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        held = experts_held(p)
        m = self.block_size(n * k, moe.num_experts)  # the whole layer's rule, also on X/n experts
        bound = (n * k + min(held, n * k) * (m - 1)) // m  # `max_blocks` over the held experts
        token, weight, block_expert, used = _block_layout(experts, weights, held, m, bound)
        stacked = experts_of(p)

        def body(b, acc):
            tok = jax.lax.dynamic_slice_in_dim(token, b * m, m)  # B*T marks a padding row
            w = jax.lax.dynamic_slice_in_dim(weight, b * m, m)
            e = {
                name: jax.lax.dynamic_index_in_dim(v, block_expert[b], keepdims=False)
                for name, v in stacked.items()
            }
            xb = x.at[tok].get(mode="fill", fill_value=0)  # the block's m rows of x
            return acc.at[tok].add(weighted(expert_mlp(e, xb, moe), w), mode="drop")

        return jax.lax.fori_loop(0, used, body, accumulator(acc, x))


def _block_layout(experts: Int["B*T Kx"], weights: Float["B*T Kx"], num_experts: int, m: int,
                  max_blocks: int):  # fmt: skip
    """The padded rows of the blocked backend (module docstring): each of the `max_blocks * m`
    rows' token (B*T on padding rows) and routing weight (0 on padding rows), each block's
    expert, and the number of blocks used (the loop's trip count). Assignments to ids >=
    `num_experts` (not here) get no row."""
    n, k = experts.shape
    order, sizes = sort_by_expert(experts, num_experts)
    blocks = (sizes + m - 1) // m  # [Nx] blocks of each expert
    block_end = jnp.cumsum(blocks)  # [Nx]
    chosen = experts.reshape(-1)[order]  # [B*T*Kx] expert of each sorted assignment
    rank = jnp.arange(n * k, dtype=jnp.int32) - (jnp.cumsum(sizes) - sizes)[chosen]
    row = (block_end - blocks)[chosen] * m + rank  # [B*T*Kx] padded row of each assignment
    row = jnp.where(chosen < num_experts, row, max_blocks * m)  # not here: dropped below
    token = jnp.full((max_blocks * m,), n, jnp.int32).at[row].set(order // k, mode="drop")
    flat_weights = weights.reshape(-1)[order]
    weight = jnp.zeros((max_blocks * m,), weights.dtype).at[row].set(flat_weights, mode="drop")
    blocks_before = jnp.arange(max_blocks, dtype=jnp.int32)
    block_expert = jnp.searchsorted(block_end, blocks_before, side="right", method="compare_all")
    block_expert = jnp.minimum(block_expert, num_experts - 1).astype(jnp.int32)
    return token, weight, block_expert, block_end[-1]
