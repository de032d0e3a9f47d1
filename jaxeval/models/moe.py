"""Mixture-of-Experts feed-forward layers, equal to transformers' sparse MoE blocks.

One layer, per token: a router scores the X experts, the K best are run, and their outputs are
summed weighted by the routing weights; shared experts (always on) are added. Shapes: tokens are
the B*T rows of `x` flattened; X experts, K experts per token (the top-k), F the width of one
expert (`MoESpec.expert_size`), D the model width. The routing of one token, X = 4, K = 2:

    logits        [1.0, 3.0, 0.5, 2.0]
    scores        softmax -> [0.085, 0.631, 0.052, 0.232]   (or sigmoid; families below)
    experts       top_k   -> [1, 3]    weights [0.631, 0.232], renormalised [0.731, 0.269]
    output        0.731 * expert_1(x) + 0.269 * expert_3(x)   (+ the shared experts)

The experts run only on the tokens routed to them: the B*T*K assignments are sorted by expert and
each expert's group is one grouped matmul. How the grouped matmuls run is the spec's `experts`
backend (`select_experts`, chosen once per model like `attention_backend.select_attention`):

    ragged   `jax.lax.ragged_dot` over the sorted assignments; XLA:TPU runs it natively
    blocked  each expert's group padded to a multiple of a block of m rows; a loop over the used
             blocks only (dynamic trip count) runs one expert's whole MLP per block. The choice
             off TPU: XLA:CPU and GPU expand `ragged_dot` into every expert on every sorted
             assignment, X times the FLOPs (tests/models/test_moe.py has the numbers)
    dense    every expert on every token (X/K times the FLOPs), the reference of the tests

Assignment layout of the blocked backend, X = 3 experts, K = 1, m = 2, experts of 5 tokens
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
                          rest -inf; weights the uncorrected scores, renormalised (+ 1e-20),
                          * routed_scaling_factor, float32; shared experts

Combination (HF's default `grouped_mm` experts): each expert's output in x's dtype times its
weight (in the weight's dtype: float32 or x's), summed over the K in float32, cast to x's dtype,
then the shared experts' output (x's dtype) added.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models.layers import ACTIVATIONS, HIGHEST, dense, mlp
from jaxeval.models.param_info import ParamInfo
from jaxeval.shapes import Float, Int, pow2_at_most

ENV = "JAXEVAL_MOE"
SETTINGS = ("auto", "ragged", "blocked")
SCORINGS = ("softmax", "sigmoid")
ORDERS = ("score_then_topk", "topk_then_softmax")
GROUP_SCORES = ("max", "top2_sum")
DTYPES = ("hidden", "float32")
GPT_OSS = "gpt_oss"  # the clamped SwiGLU of gpt_oss, an `activation` beside layers.ACTIVATIONS


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
    `e` holds one expert's weights: gate, up [D, F], down [F, D], biases [F] / [D] (gpt_oss)."""
    g = dense(x, e["gate"], "...d,df->...f", e.get("gate_bias"))
    u = dense(x, e["up"], "...d,df->...f", e.get("up_bias"))
    return dense(_glu(g, u, moe), e["down"], "...f,fd->...d", e.get("down_bias"))


_EXPERT_KEYS = ("gate", "up", "down", "gate_bias", "up_bias", "down_bias")


def _experts_of(p: dict[str, Any]) -> dict[str, jax.Array]:
    """The stacked [X, ...] expert weights of a layer's parameters."""
    return {k: p[k] for k in _EXPERT_KEYS if k in p}


def _weighted(y: jax.Array, weights: jax.Array) -> jax.Array:
    """y * weight in their common dtype (HF's product), then float32 for the sum over the K."""
    return (y * weights[..., None]).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------
# Expert backends: sum_k weight_k * expert_k(x) in float32, [B*T, D]
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseExperts:
    """The reference: all X experts on all tokens, then each token's K outputs picked. Tests only:
    X/K times the FLOPs and an [X, B*T, D] intermediate."""

    name: str = "dense"

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T K"], weights: Float["B*T K"], *,
                moe) -> Float["B*T D"]:  # fmt: skip
        y = jax.vmap(lambda e: _expert_mlp(e, x, moe))(_experts_of(p))  # [X, B*T, D]
        picked = y[experts, jnp.arange(x.shape[0])[:, None]]  # [B*T, K, D]
        return _weighted(picked, weights).sum(axis=1)


def _sort_by_expert(experts: Int["B*T K"], num_experts: int):
    """(order, sizes): the flat assignments (token * K + k) sorted by expert (stable), and each
    expert's number of assignments [X]."""
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    return order, sizes


@dataclasses.dataclass(frozen=True, kw_only=True)
class RaggedExperts:
    """`jax.lax.ragged_dot` over the assignments sorted by expert: native on XLA:TPU, a dense
    computation over all experts on XLA:CPU and GPU (module docstring)."""

    name: str = "ragged"

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T K"], weights: Float["B*T K"], *,
                moe) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        order, sizes = _sort_by_expert(experts, moe.num_experts)
        rows = x[order // k]  # [B*T*K, D] sorted by expert
        chosen = experts.reshape(-1)[order]  # [B*T*K]

        def grouped(h, w, bias):
            y = jax.lax.ragged_dot(h, w.astype(h.dtype), sizes, precision=HIGHEST)
            return y if bias is None else y + bias[chosen].astype(h.dtype)

        g = grouped(rows, p["gate"], p.get("gate_bias"))
        u = grouped(rows, p["up"], p.get("up_bias"))
        y = grouped(_glu(g, u, moe), p["down"], p.get("down_bias"))  # [B*T*K, D]
        y = jnp.zeros_like(y).at[order].set(y).reshape(n, k, -1)  # back to token order
        return _weighted(y, weights).sum(axis=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockedExperts:
    """Each expert's group of assignments padded to a multiple of `block` rows; a loop over the
    used blocks only, each running one expert's whole MLP (weights read by dynamic index).

    `block` None: `block_size`'s rule, m = the largest power of two <= B*T*K / (4 X), clamped to
    [8, 128]. The loop runs sum over experts of ceil(group / m) blocks, at most
    B*T*K / m + min(X, B*T*K): padding adds at most X m rows, a quarter of the B*T*K assignments
    where the clamp does not bind (Qwen3-30B-A3B, 2,048 tokens: m = 32, at most 1.25 times the
    active FLOPs, tests/models/test_moe.py). Small batches (decoding) clamp to m = 8: each used
    expert's weights are read once, which bounds those steps anyway.
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
        """The static bound on the loop's trip count (class docstring)."""
        m = self.block_size(assignments, num_experts)
        return assignments // m + min(num_experts, assignments)

    def combine(self, p, x: Float["B*T D"], experts: Int["B*T K"], weights: Float["B*T K"], *,
                moe) -> Float["B*T D"]:  # fmt: skip
        n, k = experts.shape
        m = self.block_size(n * k, moe.num_experts)
        token, weight, block_expert, used = _block_layout(
            experts, weights, moe.num_experts, m, self.max_blocks(n * k, moe.num_experts)
        )
        stacked = _experts_of(p)

        def body(b, acc):
            tok = jax.lax.dynamic_slice_in_dim(token, b * m, m)  # [m]: B*T marks a padding row
            w = jax.lax.dynamic_slice_in_dim(weight, b * m, m)
            e = {
                name: jax.lax.dynamic_index_in_dim(v, block_expert[b], keepdims=False)
                for name, v in stacked.items()
            }
            xb = x.at[tok].get(mode="fill", fill_value=0)  # [m, D]
            return acc.at[tok].add(_weighted(_expert_mlp(e, xb, moe), w), mode="drop")

        acc = jnp.zeros((n, x.shape[-1]), jnp.float32)
        return jax.lax.fori_loop(0, used, body, acc)


def _block_layout(experts: Int["B*T K"], weights: Float["B*T K"], num_experts: int, m: int,
                  max_blocks: int):  # fmt: skip
    """The padded rows of the blocked backend (module docstring): each of the `max_blocks * m`
    rows' token (B*T on padding rows) and routing weight (0 on padding rows), each block's
    expert, and the number of blocks used (the loop's trip count)."""
    n, k = experts.shape
    order, sizes = _sort_by_expert(experts, num_experts)
    blocks = (sizes + m - 1) // m  # [X] blocks of each expert
    block_end = jnp.cumsum(blocks)  # [X]
    chosen = experts.reshape(-1)[order]  # [B*T*K] expert of each sorted assignment
    rank = jnp.arange(n * k, dtype=jnp.int32) - (jnp.cumsum(sizes) - sizes)[chosen]
    row = (block_end - blocks)[chosen] * m + rank  # [B*T*K] padded row of each assignment
    token = jnp.full((max_blocks * m,), n, jnp.int32).at[row].set(order // k)
    weight = jnp.zeros((max_blocks * m,), weights.dtype).at[row].set(weights.reshape(-1)[order])
    blocks_before = jnp.arange(max_blocks, dtype=jnp.int32)
    block_expert = jnp.searchsorted(block_end, blocks_before, side="right", method="compare_all")
    block_expert = jnp.minimum(block_expert, num_experts - 1).astype(jnp.int32)
    return token, weight, block_expert, block_end[-1]


ExpertBackend = DenseExperts | RaggedExperts | BlockedExperts
DENSE = DenseExperts()
RAGGED = RaggedExperts()
BLOCKED = BlockedExperts()


def requested(setting: str | None = None) -> str:
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
    and blocked elsewhere (module docstring)."""
    value = requested(setting)
    if value != "auto":
        return RAGGED if value == "ragged" else BLOCKED
    if isinstance(platform_or_mesh, Mesh):
        platforms = {d.platform for d in platform_or_mesh.devices.flat}
    else:
        platforms = {platform_or_mesh or jax.default_backend()}
    return RAGGED if platforms == {"tpu"} else BLOCKED


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
    correction_bias      e_score_correction_bias [X], added for the choice only (deepseek_v3,
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
    experts              the expert backend (`select_experts`)
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
    experts: ExpertBackend = BLOCKED

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
        if not isinstance(self.experts, (DenseExperts, RaggedExperts, BlockedExperts)):
            problems.append(f"experts={self.experts!r} is not an expert backend")
        if problems:
            raise ValueError("MoESpec: " + "; ".join(problems))

    @property
    def grouped(self) -> bool:
        """Whether group-limited routing removes any expert (topk_group < n_group)."""
        return self.topk_group < self.n_group


def moe_param_layout(moe: MoESpec, d: int, L: int) -> dict[str, Any]:
    """One MoE layer's parameters stacked over L layers, canonical layout (x @ W):

    router [L, D, X]  router_bias, correction_bias [L, X]
    gate, up [L, X, D, F]  down [L, X, F, D]  gate_bias, up_bias [L, X, F]  down_bias [L, X, D]
    shared {gate, up [L, D, S], down [L, S, D]}  shared_gate [L, D, 1]   (S = shared_size)
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


def router_logits(p: dict[str, Any], x: Float["B*T D"], *, moe: MoESpec) -> Float["B*T X"]:
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


def _group_keep(choice: Float["B*T X"], moe: MoESpec) -> jax.Array:
    """bool [B*T, X]: the experts of each token's best `topk_group` groups."""
    n, x = choice.shape
    grouped = choice.reshape(n, moe.n_group, x // moe.n_group)
    if moe.group_score == "max":
        group_scores = grouped.max(axis=-1)  # [B*T, n_group]
    else:
        group_scores = jax.lax.top_k(grouped, 2)[0].sum(axis=-1)
    best = jax.lax.top_k(group_scores, moe.topk_group)[1]  # [B*T, topk_group]
    keep = (best[:, :, None] == jnp.arange(moe.n_group)).any(axis=1)  # [B*T, n_group]
    return jnp.repeat(keep, x // moe.n_group, axis=1)


def route(
    logits: Float["B*T X"], p: dict[str, Any], moe: MoESpec
) -> tuple[Float["B*T K"], Int["B*T K"]]:
    """(weights float32 [B*T, K], experts int32 [B*T, K]) from float32 router logits, as HF's
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
    top, experts = jax.lax.top_k(choice, moe.top_k)
    # deepseek_v2 reads the weights from its masked scores, deepseek_v3 / glm4_moe from the
    # uncorrected, unmasked ones.
    weights = top if moe.group_score == "max" and not moe.correction_bias else None
    if weights is None:
        weights = jnp.take_along_axis(scores, experts, axis=-1)
    if moe.norm_topk_prob:
        eps = 1e-20 if moe.scoring == "sigmoid" else 0.0  # deepseek_v3 / glm4_moe add 1e-20
        weights = weights / (weights.sum(axis=-1, keepdims=True) + eps)
    return weights * moe.routed_scaling_factor, experts


def moe_block(p: dict[str, Any], x: Float["B T D"], *, moe: MoESpec) -> Float["B T D"]:
    """The MoE feed-forward layer (module docstring) on `x`, in x's dtype; `p` one layer's
    parameters (`moe_param_layout` without the L axis)."""
    b, t, d = x.shape
    h = x.reshape(b * t, d)
    weights, experts = route(router_logits(p, h, moe=moe), p, moe)
    if moe.weight_dtype == "hidden":
        weights = weights.astype(x.dtype)
    out = moe.experts.combine(p, h, experts, weights, moe=moe).astype(x.dtype).reshape(b, t, d)
    if moe.shared_size:
        shared = mlp(p["shared"], x, kind="gated", activation=moe.activation)
        if moe.shared_gate:
            shared = jax.nn.sigmoid(dense(x, p["shared_gate"], "btd,do->bto")) * shared
        out = out + shared
    return out
