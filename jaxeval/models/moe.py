"""Mixture-of-Experts feed-forward layers, equal to transformers' sparse MoE blocks.

One layer, per token: a router scores the X experts, the K best are run, and their outputs are
summed weighted by the routing weights; shared experts (always on) are added. Shapes: tokens are
the B*T rows of `x` flattened; Nx experts, Kx experts per token (the top-k), Fx the width of one
expert (`MoESpec.expert_size`), D the model width. The routing of one token, Nx = 4, Kx = 2:

    logits        [1.0, 3.0, 0.5, 2.0]
    scores        softmax -> [0.085, 0.631, 0.052, 0.232]   (or sigmoid; families below)
    experts       top_k   -> [1, 3]    weights [0.631, 0.232], renormalised [0.731, 0.269]
    output        0.731 * expert_1(x) + 0.269 * expert_3(x)   (+ the shared experts)

The experts run only on the tokens routed to them: the B*T*K assignments are sorted by expert and
each expert's group is one grouped matmul. How the grouped matmuls run is the runtime's `experts`
backend (`select_experts`, chosen once per model like `attention.select_attention`, held by
`jaxeval.models.runtime.Runtime`):

    ragged   `jax.lax.ragged_dot` over the sorted assignments; XLA:TPU runs it natively
    blocked  each expert's group padded to a multiple of a block of m rows; a loop over the used
             blocks only (dynamic trip count) runs one expert's whole MLP per block. The choice
             off TPU: XLA:CPU and GPU expand `ragged_dot` into every expert on every sorted
             assignment, X times the FLOPs (tests/models/test_moe.py has the numbers)
    dense    every expert on every token (X/K times the FLOPs), the reference of the tests

On a mesh of several devices the backend runs under expert parallelism
(`jaxeval.models.expert_parallel`): the expert weights split on the experts dimension, each
device runs its own experts on every token routed to them; the routing here is unchanged.

Assignment layout of the blocked backend, Nx = 3 experts, Kx = 1, m = 2, experts of 5 tokens
[2, 0, 2, 2, 0]:

    sorted by expert     tokens [1, 4 | 0, 2, 3]     group sizes [2, 0, 3]
    padded rows          [1, 4 | 0, 2 | 3, pad]      blocks of expert [0, 2, 2], 3 blocks used

Routing per family (HF's `*TopKRouter` / `*TopkRouter` classes; every cast is HF's):

    mixtral               softmax(float32(logits in x's dtype)) -> top-k -> renormalise; weights
                          stay float32
    qwen2_moe, qwen3_moe, softmax in float32 -> top-k -> renormalise if `norm_topk_prob`; weights
    olmoe                 cast back to x's dtype. qwen2_moe adds sigmoid(x G) * shared(x)
    granitemoe            top-k of float32(logits) -> softmax over the K; weights in x's dtype
    gpt_oss               logits with a bias -> top-k -> softmax over the K, in x's dtype; experts
                          with biases, interleaved gate/up and the clamped SwiGLU `_gpt_oss_glu`
    deepseek_v2           logits from float32 x and weights; softmax; greedy top-k, or
                          ("group_limited_greedy") the best `topk_group` of `n_group` groups by
                          their max score, the rest zeroed; weights * routed_scaling_factor,
                          float32, never renormalised (HF ignores `norm_topk_prob`); shared experts
    deepseek_v3, glm4_moe logits from float32; sigmoid; experts chosen on scores + correction
                          bias, groups ranked by the sum of their two best corrected scores, the
                          rest -inf; weights the uncorrected scores, renormalised (+ 1e-20)
                          if `norm_topk_prob`, * routed_scaling_factor, float32; shared experts

Combination (HF's default `grouped_mm` experts): each expert's output in x's dtype times its
weight (in the weight's dtype: float32 or x's), summed over the K in float32, cast to x's dtype,
then the shared experts' output (x's dtype) added.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models.experts import BLOCKED, GPT_OSS, ExpertBackend
from jaxeval.models.layers import ACTIVATIONS, HIGHEST, dense, mlp
from jaxeval.models.param_info import ParamInfo
from jaxeval.shapes import Float, Int

SCORINGS = ("softmax", "sigmoid")
ORDERS = ("score_then_topk", "topk_then_softmax")
GROUP_SCORES = ("max", "top2_sum")
DTYPES = ("hidden", "float32")


# ---------------------------------------------------------------------------------------------
# The spec, the parameters, the layer
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class MoESpec:
    """One MoE layer's static configuration (hashable: part of the model spec, a jit key).

    num_experts          X routed experts
    top_k                K experts per token
    expert_size          F, each routed expert's hidden width
    scoring              "softmax" | "sigmoid" (deepseek_v3, glm4_moe)
    order                "score_then_topk": scores over all X, then the top K; "topk_then_softmax":
                         the top K logits, softmax over the K (granitemoe, gpt_oss)
    norm_topk_prob       renormalise the K weights to sum 1 (mixtral always; qwen2_moe, qwen3_moe,
                         olmoe, deepseek_v3, glm4_moe per config; deepseek_v2 never)
    routed_scaling_factor  multiplies the weights (deepseek_v2, deepseek_v3, glm4_moe)
    n_group, topk_group  experts in n_group equal groups, only the best topk_group groups eligible
                         (deepseek_v2 "group_limited_greedy", deepseek_v3, glm4_moe; 1, 1: off)
    group_score          a group's rank: "max" score (deepseek_v2: the others' scores become 0,
                         the weights read from them) or "top2_sum" of its two best corrected
                         scores (deepseek_v3, glm4_moe: the others -inf)
    router_bias          the router has a bias (gpt_oss)
    correction_bias      e_score_correction_bias [Nx], added for the choice only (deepseek_v3,
                         glm4_moe)
    expert_bias          the experts' projections have biases (gpt_oss)
    activation           a key of layers.ACTIVATIONS, or "gpt_oss": the clamped SwiGLU
    swiglu_limit, swiglu_alpha   gpt_oss's clamp and sigmoid slope
    shared_size          the shared experts' total hidden width, 0 = none (qwen2_moe
                         shared_expert_intermediate_size; deepseek_v2, deepseek_v3, glm4_moe
                         n_shared_experts * moe_intermediate_size)
    shared_gate          the shared output times sigmoid(x G), G [D, 1] (qwen2_moe)
    router_dtype         "hidden": logits in x's dtype (mixtral, qwen2_moe, qwen3_moe, olmoe,
                         granitemoe, gpt_oss); "float32": from float32 x and weights (deepseek_v2,
                         deepseek_v3, glm4_moe)
    weight_dtype         the routing weights' dtype: "float32" (mixtral, deepseek_v2, deepseek_v3,
                         glm4_moe) or "hidden", x's (qwen2_moe, qwen3_moe, olmoe, granitemoe,
                         gpt_oss)
    """

    num_experts: int
    top_k: int
    expert_size: int
    scoring: str = "softmax"
    order: str = "score_then_topk"
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    group_score: str = "max"
    router_bias: bool = False
    correction_bias: bool = False
    expert_bias: bool = False
    activation: str = "silu"
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    shared_size: int = 0
    shared_gate: bool = False
    router_dtype: str = "hidden"
    weight_dtype: str = "float32"

    def __post_init__(self):
        problems = []
        for name, allowed in (
            ("scoring", SCORINGS),
            ("order", ORDERS),
            ("group_score", GROUP_SCORES),
            ("router_dtype", DTYPES),
            ("weight_dtype", DTYPES),
        ):
            if getattr(self, name) not in allowed:
                problems.append(f"{name}={getattr(self, name)!r} is not one of {allowed}")
        if not 1 <= self.top_k <= self.num_experts:
            problems.append(f"top_k={self.top_k} must be in [1, num_experts={self.num_experts}]")
        if self.n_group < 1 or self.num_experts % self.n_group:
            problems.append(f"n_group={self.n_group} must divide num_experts={self.num_experts}")
        elif not 1 <= self.topk_group <= self.n_group:
            problems.append(f"topk_group={self.topk_group} must be in [1, n_group={self.n_group}]")
        elif self.group_score == "top2_sum" and self.num_experts // self.n_group < 2:
            problems.append("group_score='top2_sum' needs at least 2 experts per group")
        if self.order == "topk_then_softmax" and (
            self.scoring != "softmax"
            or self.norm_topk_prob
            or self.correction_bias
            or self.n_group > 1
        ):
            problems.append(
                "order='topk_then_softmax' takes softmax scoring without renormalisation, "
                "correction bias or groups"
            )
        if self.activation != GPT_OSS and self.activation not in ACTIVATIONS:
            problems.append(f"activation={self.activation!r} is not 'gpt_oss' or one of "
                            f"{sorted(ACTIVATIONS)}")  # fmt: skip
        if self.shared_size and self.activation == GPT_OSS:
            problems.append("shared experts use a layers.ACTIVATIONS activation, not 'gpt_oss'")
        if self.shared_gate and not self.shared_size:
            problems.append("shared_gate needs shared experts (shared_size > 0)")
        if problems:
            raise ValueError("MoESpec: " + "; ".join(problems))

    @property
    def grouped(self) -> bool:
        """Whether group-limited routing removes any expert (topk_group < n_group)."""
        return self.topk_group < self.n_group


def moe_param_layout(moe: MoESpec, d: int, L: int) -> dict[str, Any]:
    """One MoE layer's parameters stacked over L layers, canonical layout (x @ W):

    router [L, D, Nx]  router_bias, correction_bias [L, Nx]
    gate, up [L, Nx, D, Fx]  down [L, Nx, Fx, D]  gate_bias, up_bias [L, Nx, Fx]  down_bias [L, Nx, D]
    shared {gate, up [L, D, Fs], down [L, Fs, D]}  shared_gate [L, D, 1]   (Fs = shared_size)
    """
    x, f = moe.num_experts, moe.expert_size

    def info(shape, axes):
        return ParamInfo(shape=(L, *shape), axes=("layers", *axes))

    tree: dict[str, Any] = {
        "router": info((d, x), ("embed", "experts")),
        "gate": info((x, d, f), ("experts", "embed", "expert_mlp")),
        "up": info((x, d, f), ("experts", "embed", "expert_mlp")),
        "down": info((x, f, d), ("experts", "expert_mlp", "embed")),
    }
    if moe.router_bias:
        tree["router_bias"] = info((x,), ("experts",))
    if moe.correction_bias:
        tree["correction_bias"] = info((x,), ("experts",))
    if moe.expert_bias:
        tree["gate_bias"] = info((x, f), ("experts", "expert_mlp"))
        tree["up_bias"] = info((x, f), ("experts", "expert_mlp"))
        tree["down_bias"] = info((x, d), ("experts", "norm"))
    if moe.shared_size:
        s = moe.shared_size
        tree["shared"] = {
            "gate": info((d, s), ("embed", "mlp")),
            "up": info((d, s), ("embed", "mlp")),
            "down": info((s, d), ("mlp", "embed")),
        }
    if moe.shared_gate:
        tree["shared_gate"] = info((d, 1), ("embed", "norm"))
    return tree


def router_logits(p: dict[str, Any], x: Float["B*T D"], *, moe: MoESpec) -> Float["B*T Nx"]:
    """The router's logits as HF computes them, returned in float32: rounded once to x's dtype
    (`router_dtype` "hidden", bias included as in torch's fused addmm) or from float32 x and
    weights ("float32")."""
    compute = x.dtype if moe.router_dtype == "hidden" else jnp.float32
    logits = jnp.einsum(
        "nd,dx->nx",
        x.astype(compute),
        p["router"].astype(compute),
        precision=HIGHEST,
        preferred_element_type=jnp.float32,
    )
    if moe.router_bias:
        logits = logits + p["router_bias"].astype(compute).astype(jnp.float32)
    return logits.astype(compute).astype(jnp.float32)


def _group_keep(choice: Float["B*T Nx"], moe: MoESpec) -> jax.Array:
    """bool [B*T, Nx]: the experts of each token's best `topk_group` groups."""
    n, x = choice.shape
    grouped = choice.reshape(n, moe.n_group, x // moe.n_group)
    if moe.group_score == "max":
        group_scores = grouped.max(axis=-1)  # one score per group
    else:
        group_scores = jax.lax.top_k(grouped, 2)[0].sum(axis=-1)
    best = jax.lax.top_k(group_scores, moe.topk_group)[1]  # each token's best groups
    keep = (best[:, :, None] == jnp.arange(moe.n_group)).any(axis=1)  # per token and group
    return jnp.repeat(keep, x // moe.n_group, axis=1)


def route(
    logits: Float["B*T Nx"], p: dict[str, Any], moe: MoESpec
) -> tuple[Float["B*T Kx"], Int["B*T Kx"]]:
    """(weights float32 [B*T, Kx], experts int32 [B*T, Kx]) from float32 router logits, as HF's
    router for the family (module docstring). Equal scores go to the lower expert index
    (`jax.lax.top_k`); torch's partial sort breaks exact ties its own way."""
    if moe.order == "topk_then_softmax":
        top, experts = jax.lax.top_k(logits, moe.top_k)
        return jax.nn.softmax(top, axis=-1), experts
    if moe.scoring == "softmax":
        scores = jax.nn.softmax(logits, axis=-1)
    else:
        scores = jax.nn.sigmoid(logits)
    choice = scores
    if moe.correction_bias:
        choice = scores + p["correction_bias"].astype(jnp.float32)
    if moe.grouped:
        fill = 0.0 if moe.group_score == "max" else -jnp.inf
        choice = jnp.where(_group_keep(choice, moe), choice, fill)
    weights, experts = jax.lax.top_k(choice, moe.top_k)
    if moe.correction_bias or moe.group_score == "top2_sum":
        # deepseek_v3 / glm4_moe: the uncorrected, unmasked scores (deepseek_v2: the masked ones)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
    if moe.norm_topk_prob:
        eps = 1e-20 if moe.scoring == "sigmoid" else 0.0  # deepseek_v3 / glm4_moe add 1e-20
        weights = weights / (weights.sum(axis=-1, keepdims=True) + eps)
    return weights * moe.routed_scaling_factor, experts


def moe_block(
    p: dict[str, Any], x: Float["B T D"], *, moe: MoESpec, backend: ExpertBackend = BLOCKED
) -> Float["B T D"]:
    """The MoE feed-forward layer (module docstring) on `x`, in x's dtype; `p` one layer's
    parameters (`moe_param_layout` without the L axis); `backend` runs the grouped matmuls
    (the runtime's `experts`)."""
    b, t, d = x.shape
    h = x.reshape(b * t, d)
    weights, experts = route(router_logits(p, h, moe=moe), p, moe)
    if moe.weight_dtype == "hidden":
        weights = weights.astype(x.dtype)
    out = backend.combine(p, h, experts, weights, moe=moe).astype(x.dtype).reshape(b, t, d)
    if moe.shared_size:
        shared = mlp(p["shared"], x, kind="gated", activation=moe.activation)
        if moe.shared_gate:
            shared = jax.nn.sigmoid(dense(x, p["shared_gate"], "btd,do->bto")) * shared
        out = out + shared
    return out
