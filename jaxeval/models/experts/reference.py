"""The expert math every backend shares, and the reference backend `DenseExperts`.

One expert is a gated MLP on token rows: down(glu(x gate + b, x up + b)) + b, in x's dtype, its
weights one slice of the layer's stacked [Nx, ...] expert weights (`spec.EXPERT_KEYS`). A backend
sums each token's K expert outputs, each times its routing weight in their common dtype (HF's
product), in float32. The reference runs every expert on every token and picks each token's K:

    X = 3 experts, Kx = 1, 2 tokens routed [[2], [0]]
    y = [expert_0(x), expert_1(x), expert_2(x)]      [Nx, B*T, D]
    picked  [y[2, 0], y[0, 1]]                       token 0 from expert 2, token 1 from expert 0
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models.experts.spec import EXPERT_KEYS, GPT_OSS, MoESpec
from jaxeval.models.layers import ACTIVATIONS, dense
from jaxeval.shapes import Float, Int


def gpt_oss_glu(gate: jax.Array, up: jax.Array, moe: MoESpec) -> jax.Array:
    """HF `GptOssExperts._apply_gate`: (clip(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit)."""
    gate = jnp.minimum(gate, moe.swiglu_limit)
    up = jnp.clip(up, -moe.swiglu_limit, moe.swiglu_limit)
    return (up + 1) * (gate * jax.nn.sigmoid(gate * moe.swiglu_alpha))


def glu(gate: jax.Array, up: jax.Array, moe: MoESpec) -> jax.Array:
    """The experts' gated activation: act(gate) * up, or gpt_oss's clamped SwiGLU."""
    if moe.activation == GPT_OSS:
        return gpt_oss_glu(gate, up, moe)
    return ACTIVATIONS[moe.activation](gate) * up


def expert_mlp(e: dict[str, jax.Array], x: jax.Array, moe: MoESpec) -> jax.Array:
    """One expert on rows `x` [..., D]: down(glu(x gate + b, x up + b)) + b, in x's dtype.
    `e` holds one expert's weights: gate, up [D, Fx], down [Fx, D], biases [Fx] / [D] (gpt_oss)."""
    g = dense(x, e["gate"], "...d,df->...f", e.get("gate_bias"))
    u = dense(x, e["up"], "...d,df->...f", e.get("up_bias"))
    return dense(glu(g, u, moe), e["down"], "...f,fd->...d", e.get("down_bias"))


def experts_of(p: dict[str, Any]) -> dict[str, jax.Array]:
    """The stacked [Nx, ...] expert weights of a layer's parameters."""
    return {k: p[k] for k in EXPERT_KEYS if k in p}


def experts_held(p: dict[str, Any]) -> int:
    """How many experts `p` holds: X, or X/n on a device of `ExpertParallel`, whose assignments to
    experts held elsewhere carry the id X/n ("not here") and contribute zero."""
    return p["gate"].shape[0]


def add_onto(acc: jax.Array | None, y: jax.Array) -> jax.Array:
    """acc + y, or y without an accumulator."""
    return y if acc is None else acc + y


def accumulator(acc: jax.Array | None, x: jax.Array) -> jax.Array:
    """The float32 [B*T, D] sums a loop adds onto: `acc`, or zeros without one."""
    return jnp.zeros(x.shape, jnp.float32) if acc is None else acc


def weighted(y: jax.Array, weights: jax.Array) -> jax.Array:
    """y * weight in their common dtype (HF's product), then float32 for the sum over the K."""
    return (y * weights[..., None]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseExperts:
    """The reference: all X experts on all tokens, then each token's K outputs picked: Nx/Kx times
    the FLOPs and an [Nx, B*T, D] intermediate. Tests, and passes of a few rows on a device's own
    experts under expert parallelism (`ExpertParallel.dense_rows`)."""

    name: str = "dense"

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T Kx"], weights: Float["B*T Kx"], *,
                moe, acc: Float["B*T D"] | None = None, mesh=None) -> Float["B*T D"]:  # fmt: skip
        y = jax.vmap(lambda e: expert_mlp(e, x, moe))(experts_of(p))  # [Nx, B*T, D]
        picked = y[experts, jnp.arange(x.shape[0])[:, None]]  # [B*T, Kx, D]
        here = (experts < experts_held(p))[..., None]  # [B*T, Kx, 1]
        return add_onto(acc, jnp.where(here, weighted(picked, weights), 0.0).sum(axis=1))


def sort_by_expert(experts: Int["B*T Kx"], num_experts: int):
    """(order, sizes): the flat assignments (token * K + k) sorted by expert (stable), and each
    expert's number of assignments [Nx]; ids >= num_experts ("not here") sort last, uncounted."""
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    return order, sizes
