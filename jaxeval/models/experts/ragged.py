"""`RaggedExperts`: the assignments sorted by expert, each expert's group one grouped matmul of
`jax.lax.ragged_dot`, which XLA:TPU runs natively (a Mosaic grouped-matmul kernel). XLA:CPU and
GPU expand it into every expert on every sorted assignment, X times the FLOPs: there the choice
is `blocked` (tests/models/test_moe.py has the numbers).

Nx = 3 experts, Kx = 1, the experts of 5 tokens [2, 0, 2, 2, 0]:

    sorted by expert     tokens [1, 4 | 0, 2, 3]     group sizes [2, 0, 3]
    ragged_dot           rows 0-1 times expert 0's weights, rows 2-4 times expert 2's
    back to tokens       row i's output added to token order[i], times its routing weight
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jaxeval.models.experts.reference import (
    accumulator,
    add_onto,
    experts_held,
    glu,
    sort_by_expert,
    weighted,
)
from jaxeval.models.layers import HIGHEST
from jaxeval.shapes import Float, Int


def ragged_matmul(h: Float["B*T*Kx D"], w: Float["Nx D F"], sizes: jax.Array) -> Float["B*T*Kx F"]:
    """`jax.lax.ragged_dot(h, w, sizes)` (sizes [Nx]: each expert's rows of h, sorted by expert) in
    h's dtype, accumulated in float32.

    XLA:TPU runs `ragged_dot` as a Mosaic grouped-matmul kernel, which refuses HIGHEST precision on
    bfloat16 operands ("Mosaic failed to compile TPU kernel: Bad lhs type") and takes HIGHEST and
    DEFAULT on float32 ones. So: HIGHEST for float32 operands (float32 stays float32 on TPUs, as
    `layers.dense`; on the CPU the same program as before, bit for bit), DEFAULT for bfloat16 ones,
    whose products the MXU computes exactly anyway (HIGHEST only splits float32 operands).
    """
    precision = HIGHEST if h.dtype == jnp.float32 else jax.lax.Precision.DEFAULT
    y = jax.lax.ragged_dot(h, w, sizes, precision=precision, preferred_element_type=jnp.float32)
    return y.astype(h.dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RaggedExperts:
    """`jax.lax.ragged_dot` over the assignments sorted by expert: native on XLA:TPU, a dense
    computation over all experts on XLA:CPU and GPU (module docstring).

    Holding every expert (one device), one pass over all B*T*K assignments. Holding X' < X of
    them (a device under expert parallelism, assignments to the others marked "not here"), only
    about B*T*K X'/X of the sorted assignments are this device's: they run in passes of
    `share_margin` (1.25) times that share, rounded up to `row_multiple` (128) rows, or of
    `pass_rows` if given, in a loop that ends when they are done, usually after one pass; no
    assignment is dropped. The gathers, products and
    sums then cover the device's own assignments instead of all B*T*K rows (8 times fewer for
    Qwen3-30B-A3B on 8 chips).
    """

    name: str = "ragged"
    pass_rows: int | None = None
    share_margin: float = 1.25
    row_multiple: int = 128

    def rows_per_pass(self, assignments: int, held: int, num_experts: int) -> int:
        """Rows of one pass over the sorted assignments (class docstring): all of them when every
        expert is held."""
        if self.pass_rows is not None:
            return max(1, min(assignments, self.pass_rows))
        if held >= num_experts:
            return assignments
        share = math.ceil(self.share_margin * assignments * held / num_experts)
        share = -(-share // self.row_multiple) * self.row_multiple
        return min(assignments, share)

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], *,
                moe, acc: Float["B*T D"] | None = None, mesh=None) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        held = experts_held(p)
        m = self.rows_per_pass(n * k, held, moe.num_experts)
        if m < n * k:
            return _ragged_passes(p, x, experts, weights, moe, held, m, acc)
        order, sizes = sort_by_expert(experts, held)
        rows = x[order // k]  # [B*T*Kx, D] sorted by expert
        chosen = experts.reshape(-1)[order]  # [B*T*Kx]
        y = _grouped_mlp(p, rows, sizes, chosen, moe)  # [B*T*Kx, D]
        y = jnp.where((chosen < held)[:, None], y, 0)  # rows past the groups: not here
        y = jnp.zeros_like(y).at[order].set(y).reshape(n, k, -1)  # back to token order
        return add_onto(acc, weighted(y, weights).sum(axis=1))


def _grouped_mlp(p, rows: jax.Array, sizes: jax.Array, chosen: jax.Array, moe) -> jax.Array:
    """The experts' MLP on `rows` sorted by expert (`sizes` rows each, `ragged_matmul`), each
    row with its expert's biases (`chosen`), in the rows' dtype."""

    def grouped(h, w, bias):
        y = ragged_matmul(h, w.astype(h.dtype), sizes)
        return y if bias is None else y + bias[chosen].astype(h.dtype)

    g = grouped(rows, p["gate"], p.get("gate_bias"))
    u = grouped(rows, p["up"], p.get("up_bias"))
    return grouped(glu(g, u, moe), p["down"], p.get("down_bias"))


def _ragged_passes(p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], moe,
                   held: int, m: int, acc: Float["B*T D"] | None) -> Float["B*T D"]:  # fmt: skip
    """`RaggedExperts.combine` in passes of m of the sorted assignments to the `held` experts
    here (those to other experts sort last and are never read): pass c takes sorted positions
    [c m, c m + m), each expert's group cut to that window, and adds its rows' weighted outputs
    to their tokens in float32 (onto `acc` when given); the loop runs ceil(here / m) passes."""
    n, k = experts.shape
    order, sizes = sort_by_expert(experts, held)
    ends = jnp.cumsum(sizes)
    starts = ends - sizes
    total = ends[-1]  # assignments here
    slots = -(-(n * k) // m) * m  # the sorted positions, padded to whole passes
    order = jnp.concatenate([order, jnp.zeros((slots - n * k,), jnp.int32)])
    flat_experts, flat_weights = experts.reshape(-1), weights.reshape(-1)

    def one_pass(c, acc):
        lo = c * m
        idx = jax.lax.dynamic_slice_in_dim(order, lo, m)  # m assignments, token * Kx + k
        here = lo + jnp.arange(m, dtype=jnp.int32) < total
        window = jnp.clip(ends, lo, lo + m) - jnp.clip(starts, lo, lo + m)  # groups in the pass
        chosen = jnp.minimum(flat_experts[idx], held - 1)  # expert of each row (biases)
        token = idx // k
        y = _grouped_mlp(p, x[token], window, chosen, moe)  # m rows
        y = jnp.where(here[:, None], y, 0)  # rows past the groups
        w = jnp.where(here, flat_weights[idx], 0)
        return acc.at[token].add(weighted(y, w))

    passes = (total + m - 1) // m
    return jax.lax.fori_loop(0, passes, one_pass, accumulator(acc, x))
