"""A Mixture-of-Experts family's routing as values (`Experts`), and the `MoESpec` it reads from
a config, with the number of leading dense-MLP layers.

    Experts(count="num_experts", dense_layers="mlp_only_layers",
            shared="shared_expert_intermediate_size", norm_topk_prob=Field("norm_topk_prob", False),
            router_dtype="hidden", weight_dtype="hidden")
        -> Qwen2-MoE's routing;  moe_spec(cfg, experts) -> its `MoESpec`

The MoE builders (`moe.build_moe`, `moe.build_mla`) read a family's `Experts` from its
`dense.Decoder` (`Decoder.experts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.experts import MoESpec
from jaxeval.models.families.config import (
    Field,
    check_rules,
    config_value,
    option_value,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Experts:
    """How one family's config names its experts, and its routing (`MoESpec` says what each
    routing value means). Rule names are keys of the tables below."""

    count: str  # the config field of X, the routed experts
    router_dtype: str  # "hidden" or "float32"
    weight_dtype: str  # "hidden" or "float32"
    dense_layers: str = "none"  # DENSE_LAYER_RULES: the leading dense-MLP layers
    shared: str | None = None  # SHARED_RULES: the shared experts' width and gate
    groups: str | None = None  # GROUP_RULES: (n_group, topk_group)
    scoring: str = "softmax"
    order: str = "score_then_topk"
    norm_topk_prob: bool | Field = False
    group_score: str = "max"
    routed_scaling: bool = False  # read `routed_scaling_factor` (default 1)
    router_bias: bool = False
    correction_bias: bool = False
    expert_bias: bool = False
    activation: str | None = None  # None: the config's `hidden_act`
    swiglu_limit: bool = False  # read `swiglu_limit` (default 7)

    def __post_init__(self):
        check_rules(
            {
                "dense_layers": (self.dense_layers, DENSE_LAYER_RULES),
                "shared": (self.shared, SHARED_RULES),
                "groups": (self.groups, GROUP_RULES),
            }
        )


def _first_k_dense_replace(cfg: Any) -> int:
    k = int(config_value(cfg, "first_k_dense_replace", default=0))
    if int(config_value(cfg, "moe_layer_freq", default=1)) != 1:
        raise JaxevalError(f"{cfg.model_type} with moe_layer_freq != 1 is not supported")
    return k


def _mlp_only_layers(cfg: Any) -> int:
    step = int(config_value(cfg, "decoder_sparse_step", default=1))
    only = set(cfg.mlp_only_layers or ())
    dense = [i for i in range(cfg.num_hidden_layers) if i in only or (i + 1) % step]
    if dense != list(range(len(dense))):
        raise JaxevalError(
            f"{cfg.model_type} with dense MLP layers {dense} is not supported",
            hint="only a run of dense layers at the start (mlp_only_layers=[0..k-1], "
            "decoder_sparse_step=1) loads",
        )
    return len(dense)


# The number of leading dense-MLP layers (the rest must all be MoE), by the rule a row names.
DENSE_LAYER_RULES: dict[str, Callable[[Any], int]] = {
    "none": lambda cfg: 0,
    "first_k_dense_replace": _first_k_dense_replace,  # DeepSeek, GLM-4.5 (moe_layer_freq 1)
    "mlp_only_layers": _mlp_only_layers,  # Qwen-MoE: mlp_only_layers, decoder_sparse_step
}


def _gated_shared_expert(cfg: Any, f: int) -> tuple[int, bool]:
    """Qwen2-MoE: one gated shared expert of its own width (none where that width is 0)."""
    size = int(config_value(cfg, "shared_expert_intermediate_size", default=0))
    return size, bool(size)


# (shared_size, shared_gate) from the config and F, by the rule a row names.
SHARED_RULES: dict[str, Callable[[Any, int], tuple[int, bool]]] = {
    "shared_expert_intermediate_size": _gated_shared_expert,
    # DeepSeek, GLM-4.5: n ungated shared experts of the routed experts' width
    "n_shared_experts": lambda cfg, f: (
        int(config_value(cfg, "n_shared_experts", default=0) or 0) * f,
        False,
    ),
}

# (n_group, topk_group) from the config, by the rule a row names (none: 1, 1, no groups).
GROUP_RULES: dict[str, Callable[[Any], tuple[int, int]]] = {
    "n_group": lambda cfg: (
        int(config_value(cfg, "n_group", default=1)),
        int(config_value(cfg, "topk_group", default=1)),
    ),
    # DeepSeek-V2: groups only with topk_method "group_limited_greedy" (V2-Lite: "greedy")
    "group_limited_greedy": lambda cfg: (
        (int(cfg.n_group), int(cfg.topk_group))
        if config_value(cfg, "topk_method", default="greedy") == "group_limited_greedy"
        else (1, 1)
    ),
}


def moe_spec(cfg: Any, experts: Experts) -> MoESpec:
    """The routing and expert shapes of an MoE config (semantics per family:
    `jaxeval.models.experts.routing`)."""
    top_k = int(cfg.num_experts_per_tok)
    count = int(getattr(cfg, experts.count))
    f = int(config_value(cfg, "moe_intermediate_size", default=cfg.intermediate_size))
    activation = cfg.hidden_act
    shared, gate = SHARED_RULES[experts.shared](cfg, f) if experts.shared else (0, False)
    groups = GROUP_RULES[experts.groups](cfg) if experts.groups else (1, 1)
    scaling = (
        config_value(cfg, "routed_scaling_factor", default=1.0) if experts.routed_scaling else 1.0
    )
    limit = config_value(cfg, "swiglu_limit", default=7.0) if experts.swiglu_limit else 7.0
    return MoESpec(
        num_experts=count,
        top_k=top_k,
        expert_size=f,
        scoring=experts.scoring,
        order=experts.order,
        norm_topk_prob=bool(option_value(experts.norm_topk_prob, cfg)),
        routed_scaling_factor=float(scaling),
        n_group=groups[0],
        topk_group=groups[1],
        group_score=experts.group_score,
        router_bias=experts.router_bias,
        correction_bias=experts.correction_bias,
        expert_bias=experts.expert_bias,
        activation=experts.activation or activation,
        swiglu_limit=float(limit),
        shared_size=shared,
        shared_gate=gate,
        router_dtype=experts.router_dtype,
        weight_dtype=experts.weight_dtype,
    )


def experts_and_dense_layers(cfg: Any, experts: Experts) -> tuple[MoESpec, int]:
    """(the experts, the number of leading dense layers), or the error that refuses the config."""
    if getattr(cfg, "clip_qkv", None) is not None:
        raise JaxevalError(f"{cfg.model_type} with clip_qkv is not supported")
    n = cfg.num_hidden_layers
    k = DENSE_LAYER_RULES[experts.dense_layers](cfg)
    if k >= n:
        raise JaxevalError(f"{cfg.model_type} config has no MoE layer ({k} dense of {n} layers)")
    return moe_spec(cfg, experts), k
