"""One MoE layer's static configuration (`MoESpec`) and its parameter layout (`moe_param_layout`).

Shapes: Nx routed experts, Kx experts per token (the top-k), Fx the width of one expert
(`MoESpec.expert_size`), Fs the shared experts' total width, D the model width, L layers. The
family table (`jaxeval.models.families`) fills a `MoESpec` from a checkpoint's config; the
routing (`routing`), the layer (`block`) and the expert backends read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxeval.models.layers import ACTIVATIONS
from jaxeval.models.param_info import ParamInfo

SCORINGS = ("softmax", "sigmoid")
ORDERS = ("score_then_topk", "topk_then_softmax")
GROUP_SCORES = ("max", "top2_sum")
DTYPES = ("hidden", "float32")
GPT_OSS = "gpt_oss"  # the clamped SwiGLU of gpt_oss, an `activation` beside layers.ACTIVATIONS
EXPERT_KEYS = ("gate", "up", "down", "gate_bias", "up_bias", "down_bias")  # stacked [Nx, ...]


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
