"""The Llama-style builder: one function, and a family's differences from Llama as values.

    build_decoder(cfg, "float32", Decoder())                          -> Llama's ModelSpec
    build_decoder(cfg, "float32", Decoder(qk_norm="head"))            -> Qwen3's
    build_decoder(cfg, "float32", Decoder(norm="layer", mlp="plain",  -> Starcoder2's
        norm_eps="norm_epsilon", sliding="all", ...))

Every option of `Decoder` defaults to what Llama does. An option is a constant, a config field read
(`config.Field`, `config.When`), or the name of a rule in one of the small tables below
(`SCALES`, `ACTIVATION_RULES`, `ROPE_LAYER_RULES`, `config.SLIDING_RULES`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.families.config import (
    SLIDING_RULES,
    Field,
    When,
    check_rules,
    common_fields,
    config_value,
    layer_types,
    option_value,
    rope_tables,
    rotary_dim,
    windows,
)
from jaxeval.models.families.routing import Experts
from jaxeval.models.spec import ModelSpec

ATTENTION_BIAS = Field("attention_bias", False)

# A scale of the spec (`attn_scale`, `embed_scale`, `residual_scale`, `logit_scale`) from the config
# and E, by the formula a row names.
SCALES: dict[str, Callable[[Any, int], float]] = {
    "head_dim**-0.5": lambda cfg, head_dim: head_dim**-0.5,
    # Gemma-2/3: q.k / sqrt(query_pre_attn_scalar), where the config sets one
    "query_pre_attn_scalar**-0.5": lambda cfg, head_dim: (
        (getattr(cfg, "query_pre_attn_scalar", None) or head_dim) ** -0.5
    ),
    "sqrt(hidden_size)": lambda cfg, head_dim: math.sqrt(cfg.hidden_size),  # Gemma's embeddings
    "attention_multiplier": lambda cfg, head_dim: float(cfg.attention_multiplier),  # Granite
    "embedding_multiplier": lambda cfg, head_dim: float(cfg.embedding_multiplier),
    "residual_multiplier": lambda cfg, head_dim: float(cfg.residual_multiplier),
    "1/logits_scaling": lambda cfg, head_dim: 1.0 / float(cfg.logits_scaling),
    "logit_scale": lambda cfg, head_dim: float(cfg.logit_scale),  # Cohere
}


def _gemma_activation(cfg: Any) -> str:
    activation = config_value(cfg, "hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    # legacy Gemma configs mean the tanh approximation by "gelu"
    return "gelu_pytorch_tanh" if activation == "gelu" else activation


# The MLP's activation (a key of layers.ACTIVATIONS) by the rule a row names.
ACTIVATION_RULES: dict[str, Callable[[Any], str]] = {
    "hidden_act": lambda cfg: cfg.hidden_act,
    "hidden_activation, gelu as tanh": _gemma_activation,
}


# Which layers apply rope (`ModelSpec.rope_layers`, () = all of them), by the rule a row names:
#     no_rope_layers         SmolLM3: [1, 1, 1, 0] -> (True, True, True, False), 0 = NoPE
#     sliding                Cohere-2: layer types ("sliding", "full") -> (True, False)
#     sliding_when_windowed  EXAONE-4: as "sliding" where the config sets a window, else ()
ROPE_LAYER_RULES: dict[str, Callable[[Any, list[str]], tuple[bool, ...]]] = {
    "all": lambda cfg, types: (),
    "no_rope_layers": lambda cfg, types: tuple(
        bool(x) for x in cfg.no_rope_layers[: cfg.num_hidden_layers]
    ),
    "sliding": lambda cfg, types: tuple(t == "sliding_attention" for t in types),
    "sliding_when_windowed": lambda cfg, types: (
        tuple(t == "sliding_attention" for t in types)
        if getattr(cfg, "sliding_window", None)
        else ()
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decoder:
    """What one family's decoder does differently from Llama's; each default is Llama's.

    Values: a constant, a config `Field` / `When`, or a rule name (module docstring).
    `experts`: the MoE families' routing (`routing.Experts`), read by their builders
    (`moe.build_moe`, `moe.build_mla`).
    """

    norm: str = "rms"  # a layers.NORM_KINDS kind
    norm_eps: str = "rms_norm_eps"  # the config field of the norms' epsilon
    mlp: str = "gated"
    activation: str = "hidden_act"  # ACTIVATION_RULES
    mlp_bias: bool | Field = Field("mlp_bias", False)
    qkv_bias: bool | Field = ATTENTION_BIAS
    o_bias: bool | Field = ATTENTION_BIAS
    qk_norm: str | When | None = None
    residual: str | When = "sequential"
    sandwich_norms: bool = False
    explicit_head_dim: bool = True  # False: E = D / H even where the config names a head_dim
    sliding: str = "none"  # config.SLIDING_RULES, for configs without `layer_types`
    read_layer_types: bool = True  # False: all full attention, `layer_types` unread (GPT-NeoX)
    windowed: bool = True  # False: every layer global whatever its type (Gemma 1, Cohere)
    rotary_fraction: str | None = None  # the legacy config field of a partial rotary fraction
    rope_layers: str = "all"  # ROPE_LAYER_RULES
    attn_scale: str = "head_dim**-0.5"  # SCALES, likewise the three below
    embed_scale: str | None = None
    residual_scale: str | None = None
    logit_scale: str | None = None
    attn_softcap: Field | None = None
    final_softcap: Field | None = None
    attn_sinks: bool = False
    refuse_bidirectional: bool = False  # Gemma configs may be a bidirectional encoder
    experts: Experts | None = None

    def __post_init__(self):
        rules = {
            "activation": (self.activation, ACTIVATION_RULES),
            "sliding": (self.sliding, SLIDING_RULES),
            "rope_layers": (self.rope_layers, ROPE_LAYER_RULES),
            "attn_scale": (self.attn_scale, SCALES),
            "embed_scale": (self.embed_scale, SCALES),
            "residual_scale": (self.residual_scale, SCALES),
            "logit_scale": (self.logit_scale, SCALES),
        }
        check_rules(rules)


def _scale(rule: str | None, cfg: Any, head_dim: int) -> float | None:
    return None if rule is None else SCALES[rule](cfg, head_dim)


def build_decoder(cfg: Any, compute_dtype: str, options: Decoder) -> ModelSpec:
    """The `ModelSpec` of a Llama-style config, with a family's differences (`options`)."""
    model_type = cfg.model_type
    if options.refuse_bidirectional and getattr(cfg, "use_bidirectional_attention", False):
        raise JaxevalError(f"{model_type} with use_bidirectional_attention is not a causal LM")
    common = common_fields(cfg, compute_dtype)
    if not options.explicit_head_dim:
        common["head_dim"] = cfg.hidden_size // cfg.num_attention_heads
    head_dim, n = common["head_dim"], cfg.num_hidden_layers
    if options.read_layer_types:
        types = layer_types(cfg, options.sliding)
    else:
        types = ["full_attention"] * n
    rope, dynamic = rope_tables(cfg, types, rotary_dim(cfg, head_dim, options.rotary_fraction))
    return ModelSpec(
        model_type=model_type,
        **common,
        intermediate_size=cfg.intermediate_size,
        norm=options.norm,
        norm_eps=float(getattr(cfg, options.norm_eps)),
        mlp=options.mlp,
        activation=ACTIVATION_RULES[options.activation](cfg),
        mlp_bias=bool(option_value(options.mlp_bias, cfg)),
        qkv_bias=bool(option_value(options.qkv_bias, cfg)),
        o_bias=bool(option_value(options.o_bias, cfg)),
        qk_norm=option_value(options.qk_norm, cfg),
        residual=option_value(options.residual, cfg),
        sandwich_norms=options.sandwich_norms,
        sliding_window=windows(cfg, types) if options.windowed else (0,) * n,
        attn_scale=(SCALES[options.attn_scale](cfg, head_dim),) * n,
        embed_scale=_scale(options.embed_scale, cfg, head_dim),
        residual_scale=_scale(options.residual_scale, cfg, head_dim),
        logit_scale=_scale(options.logit_scale, cfg, head_dim),
        attn_softcap=option_value(options.attn_softcap, cfg),
        final_softcap=option_value(options.final_softcap, cfg),
        attn_sinks=options.attn_sinks,
        rope=rope,
        dynamic_rope=dynamic,
        rope_layers=ROPE_LAYER_RULES[options.rope_layers](cfg, types),
    )
