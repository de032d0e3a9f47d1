"""How an MoE layer's experts run on their tokens: one expert's MLP, and the grouped-matmul
backends (`select_experts`), chosen once per model like `attention.select_attention`.

    ragged   `jax.lax.ragged_dot` over the assignments sorted by expert; XLA:TPU runs it natively
    blocked  each expert's group padded to a multiple of a block of m rows; a loop over the used
             blocks only runs one expert's whole MLP per block (CPU, GPU: there `ragged_dot` is
             expanded into a dense computation over all X experts)
    dense    every expert on every token: the reference, and a decode step's few rows under
             expert parallelism (each device's own experts, `ExpertParallel.dense_rows`)

On a mesh of several devices the backend runs under expert parallelism
(`jaxeval.models.expert_parallel.ExpertParallel`): each device holds X/n experts and runs them on
every token routed to them; expert weights are never gathered.

The routing, the spec and the layer are `jaxeval.models.moe`'s; `moe` is passed in (a `MoESpec`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models.expert_parallel import EXPERT_KEYS, ExpertParallel
from jaxeval.models.layers import ACTIVATIONS, HIGHEST, dense
from jaxeval.shapes import Float, Int, pow2_at_most

ENV = "JAXEVAL_MOE"
SETTINGS = ("auto", "ragged", "blocked")
GPT_OSS = "gpt_oss"  # the clamped SwiGLU of gpt_oss, an `activation` beside layers.ACTIVATIONS
MoESpec = Any  # `jaxeval.models.moe.MoESpec` (imported there, not here: no cycle)

# ---------------------------------------------------------------------------------------------
# One expert's MLP, and the weighted sum over the K
# ---------------------------------------------------------------------------------------------


def _gpt_oss_glu(gate: jax.Array, up: jax.Array, moe: MoESpec) -> jax.Array:
    """HF `GptOssExperts._apply_gate`: (clip(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit)."""
    gate = jnp.minimum(gate, moe.swiglu_limit)
    up = jnp.clip(up, -moe.swiglu_limit, moe.swiglu_limit)
    return (up + 1) * (gate * jax.nn.sigmoid(gate * moe.swiglu_alpha))


def _glu(gate: jax.Array, up: jax.Array, moe: MoESpec) -> jax.Array:
    if moe.activation == GPT_OSS:
        return _gpt_oss_glu(gate, up, moe)
    return ACTIVATIONS[moe.activation](gate) * up


def _expert_mlp(e: dict[str, jax.Array], x: jax.Array, moe: MoESpec) -> jax.Array:
    """One expert on rows `x` [..., D]: down(glu(x gate + b, x up + b)) + b, in x's dtype.
    `e` holds one expert's weights: gate, up [D, Fx], down [Fx, D], biases [Fx] / [D] (gpt_oss)."""
    g = dense(x, e["gate"], "...d,df->...f", e.get("gate_bias"))
    u = dense(x, e["up"], "...d,df->...f", e.get("up_bias"))
    return dense(_glu(g, u, moe), e["down"], "...f,fd->...d", e.get("down_bias"))


def _experts_of(p: dict[str, Any]) -> dict[str, jax.Array]:
    """The stacked [Nx, ...] expert weights of a layer's parameters."""
    return {k: p[k] for k in EXPERT_KEYS if k in p}


def _held(p: dict[str, Any]) -> int:
    """How many experts `p` holds: X, or X/n on a device of `ExpertParallel`, whose assignments to
    experts held elsewhere carry the id X/n ("not here") and contribute zero."""
    return p["gate"].shape[0]


def _plus(acc: jax.Array | None, y: jax.Array) -> jax.Array:
    """acc + y, or y without an accumulator."""
    return y if acc is None else acc + y


def _accumulator(acc: jax.Array | None, x: jax.Array) -> jax.Array:
    """The float32 [B*T, D] sums a loop adds onto: `acc`, or zeros without one."""
    return jnp.zeros(x.shape, jnp.float32) if acc is None else acc


def _weighted(y: jax.Array, weights: jax.Array) -> jax.Array:
    """y * weight in their common dtype (HF's product), then float32 for the sum over the K."""
    return (y * weights[..., None]).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------
# Expert backends: sum_k weight_k * expert_k(x) in float32, [B*T, D] (added onto `acc` when
# given: the ring of `ExpertParallel` carries its sums through them)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseExperts:
    """The reference: all X experts on all tokens, then each token's K outputs picked: Nx/Kx times
    the FLOPs and an [Nx, B*T, D] intermediate. Tests, and passes of a few rows on a device's own
    experts under expert parallelism (`ExpertParallel.dense_rows`)."""

    name: str = "dense"

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], *,
                moe, acc: Float["B*T D"] | None = None) -> Float["B*T D"]:  # fmt: skip
        y = jax.vmap(lambda e: _expert_mlp(e, x, moe))(_experts_of(p))  # [Nx, B*T, D]
        picked = y[experts, jnp.arange(x.shape[0])[:, None]]  # [B*T, Kx, D]
        here = (experts < _held(p))[..., None]  # [B*T, Kx, 1]
        return _plus(acc, jnp.where(here, _weighted(picked, weights), 0.0).sum(axis=1))


def _sort_by_expert(experts: Int["B*T Kx"], num_experts: int):
    """(order, sizes): the flat assignments (token * K + k) sorted by expert (stable), and each
    expert's number of assignments [Nx]; ids >= num_experts ("not here") sort last, uncounted."""
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    return order, sizes


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
                moe, acc: Float["B*T D"] | None = None) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        held = _held(p)
        m = self.rows_per_pass(n * k, held, moe.num_experts)
        if m < n * k:
            return _ragged_passes(p, x, experts, weights, moe, held, m, acc)
        order, sizes = _sort_by_expert(experts, held)
        rows = x[order // k]  # [B*T*Kx, D] sorted by expert
        chosen = experts.reshape(-1)[order]  # [B*T*Kx]
        y = _grouped_mlp(p, rows, sizes, chosen, moe)  # [B*T*Kx, D]
        y = jnp.where((chosen < held)[:, None], y, 0)  # rows past the groups: not here
        y = jnp.zeros_like(y).at[order].set(y).reshape(n, k, -1)  # back to token order
        return _plus(acc, _weighted(y, weights).sum(axis=1))


def _grouped_mlp(p, rows: jax.Array, sizes: jax.Array, chosen: jax.Array, moe) -> jax.Array:
    """The experts' MLP on `rows` sorted by expert (`sizes` rows each, `ragged_matmul`), each
    row with its expert's biases (`chosen`), in the rows' dtype."""

    def grouped(h, w, bias):
        y = ragged_matmul(h, w.astype(h.dtype), sizes)
        return y if bias is None else y + bias[chosen].astype(h.dtype)

    g = grouped(rows, p["gate"], p.get("gate_bias"))
    u = grouped(rows, p["up"], p.get("up_bias"))
    return grouped(_glu(g, u, moe), p["down"], p.get("down_bias"))


def _ragged_passes(p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], moe,
                   held: int, m: int, acc: Float["B*T D"] | None) -> Float["B*T D"]:  # fmt: skip
    """`RaggedExperts.combine` in passes of m of the sorted assignments to the `held` experts
    here (those to other experts sort last and are never read): pass c takes sorted positions
    [c m, c m + m), each expert's group cut to that window, and adds its rows' weighted outputs
    to their tokens in float32 (onto `acc` when given); the loop runs ceil(here / m) passes."""
    n, k = experts.shape
    order, sizes = _sort_by_expert(experts, held)
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
        return acc.at[token].add(_weighted(y, w))

    passes = (total + m - 1) // m
    return jax.lax.fori_loop(0, passes, one_pass, _accumulator(acc, x))


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
                moe, acc: Float["B*T D"] | None = None) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        held = _held(p)
        m = self.block_size(n * k, moe.num_experts)  # the whole layer's rule, also on X/n experts
        bound = (n * k + min(held, n * k) * (m - 1)) // m  # `max_blocks` over the held experts
        token, weight, block_expert, used = _block_layout(experts, weights, held, m, bound)
        stacked = _experts_of(p)

        def body(b, acc):
            tok = jax.lax.dynamic_slice_in_dim(token, b * m, m)  # B*T marks a padding row
            w = jax.lax.dynamic_slice_in_dim(weight, b * m, m)
            e = {
                name: jax.lax.dynamic_index_in_dim(v, block_expert[b], keepdims=False)
                for name, v in stacked.items()
            }
            xb = x.at[tok].get(mode="fill", fill_value=0)  # the block's m rows of x
            return acc.at[tok].add(_weighted(_expert_mlp(e, xb, moe), w), mode="drop")

        return jax.lax.fori_loop(0, used, body, _accumulator(acc, x))


def _block_layout(experts: Int["B*T Kx"], weights: Float["B*T Kx"], num_experts: int, m: int,
                  max_blocks: int):  # fmt: skip
    """The padded rows of the blocked backend (module docstring): each of the `max_blocks * m`
    rows' token (B*T on padding rows) and routing weight (0 on padding rows), each block's
    expert, and the number of blocks used (the loop's trip count). Assignments to ids >=
    `num_experts` (not here) get no row."""
    n, k = experts.shape
    order, sizes = _sort_by_expert(experts, num_experts)
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


ExpertBackend = DenseExperts | RaggedExperts | BlockedExperts | ExpertParallel
DENSE = DenseExperts()
RAGGED = RaggedExperts()
BLOCKED = BlockedExperts()


def _requested(setting: str | None = None) -> str:
    """The setting in force: `setting`, else `JAXEVAL_MOE`, else "auto"."""
    value = (setting if setting is not None else os.environ.get(ENV) or "auto").strip().lower()
    if value not in SETTINGS:
        raise JaxevalError(
            f"moe={value!r} is not one of {', '.join(SETTINGS)}",
            field="moe",
            hint=f"set --model_args moe=... or {ENV} to auto, ragged or blocked",
        )
    return value


def select_experts(
    platform_or_mesh: str | Mesh | None, setting: str | None = None
) -> ExpertBackend:
    """The expert backend for a model on a platform ("cpu", "gpu", "tpu"), a mesh's devices or,
    for None, JAX's default backend: `setting`, else `JAXEVAL_MOE`, else auto = ragged on TPU
    and blocked elsewhere (module docstring); on a mesh of several devices that backend under
    expert parallelism (`ExpertParallel`: each device runs its own experts)."""
    value = _requested(setting)
    if isinstance(platform_or_mesh, Mesh):
        platforms = {d.platform for d in platform_or_mesh.devices.flat}
    else:
        platforms = {platform_or_mesh or jax.default_backend()}
    if value == "auto":
        value = "ragged" if platforms == {"tpu"} else "blocked"
    backend = RAGGED if value == "ragged" else BLOCKED
    if isinstance(platform_or_mesh, Mesh) and platform_or_mesh.devices.size > 1:
        return ExpertParallel(inner=backend, mesh=platform_or_mesh, dense=DENSE)
    return backend
