"""From a Hugging Face config to a `ModelSpec`, one small builder per family, chosen by `model_type`.

Configs are read through attributes, so both transformers 5 objects (RoPE under `rope_parameters`,
possibly nested per layer type) and older ones (`rope_theta`, `rope_scaling`, `rotary_pct`,
`rotary_emb_base`, `rope_local_base_freq`, `sliding_window_pattern`) work.

    FAMILIES["gemma2"].build(hf_config, compute_dtype="bfloat16") -> ModelSpec(...)
    FAMILIES["gemma2"].weights(spec) -> tree of hf_weights.Source, same structure as the params
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.mla import MLASpec
from jaxeval.models.moe import MoESpec
from jaxeval.models.rope import DynamicRope, LayerRope, layer_rope, yarn_mscale
from jaxeval.models.spec import ModelSpec
from jaxeval.models.weights import hf as hf_weights


def _get(cfg: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return default


def rope_parameters(cfg: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The standardised rope dict (`rope_type`, `rope_theta`, ...) for one layer type.

    transformers 5: `config.rope_parameters`, flat or nested by layer type. Older configs: the classic
    `rope_theta` / `rotary_emb_base` plus `rope_scaling`; Gemma-3's local layers use
    `rope_local_base_freq` and no scaling.
    """
    nested = getattr(cfg, "rope_parameters", None)
    if isinstance(nested, dict) and nested:
        if layer_type is not None and isinstance(nested.get(layer_type), dict):
            params = dict(nested[layer_type])
        elif any(isinstance(v, dict) for v in nested.values()):
            params = dict(next(v for v in nested.values() if isinstance(v, dict)))
        else:
            params = dict(nested)
    else:
        params = dict(getattr(cfg, "rope_scaling", None) or {})
        if layer_type == "sliding_attention" and getattr(cfg, "rope_local_base_freq", None):
            params = {"rope_theta": cfg.rope_local_base_freq}
    params.setdefault("rope_type", params.get("type", "default"))
    theta = _get(cfg, "rope_theta", "rotary_emb_base", default=10000.0)
    params.setdefault("rope_theta", theta)
    if params["rope_type"] in ("su", "yarn") and getattr(cfg, "model_type", None) == "phi3":
        params["rope_type"] = "longrope"  # Phi-3's legacy names, as transformers maps them
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        original = _get(
            cfg, "original_max_position_embeddings", default=cfg.max_position_embeddings
        )
        params.setdefault("original_max_position_embeddings", original)
    return params


def _rope_tables(
    cfg: Any, layer_types: list[str | None], dim: int
) -> tuple[tuple[LayerRope, ...], DynamicRope | None]:
    tables = [
        layer_rope(
            rope_parameters(cfg, t), dim=dim, max_position_embeddings=cfg.max_position_embeddings
        )
        for t in layer_types
    ]
    dynamic = [t for t in tables if isinstance(t, DynamicRope)]
    if dynamic:
        if len(set(tables)) != 1:
            raise JaxevalError(
                "dynamic rope mixed with other rope types across layers is not supported"
            )
        return (), dynamic[0]
    return tuple(tables), None


def _layer_types(cfg: Any, model_type: str) -> list[str]:
    """'sliding_attention' or 'full_attention' per layer, from `layer_types` or the older fields."""
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if types:
        return list(types)[:n]
    window = getattr(cfg, "sliding_window", None)
    if not window:
        return ["full_attention"] * n
    if model_type in ("mistral", "phi3", "starcoder2", "mixtral", "qwen3_moe"):
        return ["sliding_attention"] * n
    if model_type == "gemma2":  # even layers slide
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if model_type == "gemma3_text":
        pattern = _get(cfg, "sliding_window_pattern", "_sliding_window_pattern", default=6)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if model_type in ("qwen2", "qwen3", "qwen2_moe") and getattr(cfg, "use_sliding_window", False):
        first = _get(cfg, "max_window_layers", default=n)
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    return ["full_attention"] * n


def _windows(cfg: Any, layer_types: list[str]) -> tuple[int, ...]:
    window = getattr(cfg, "sliding_window", None) or 0
    return tuple(int(window) if t == "sliding_attention" else 0 for t in layer_types)


def _common(cfg: Any, compute_dtype: str) -> dict[str, Any]:
    heads = cfg.num_attention_heads
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_hidden_layers,
        "num_heads": heads,
        "num_kv_heads": _get(cfg, "num_key_value_heads", default=heads),
        "head_dim": _get(cfg, "head_dim", default=cfg.hidden_size // heads),
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "compute_dtype": compute_dtype,
    }


def build_llama_like(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Llama (rope scaling llama3/linear/dynamic/yarn), Mistral (window), Qwen2 (qkv bias),
    Qwen3 (per-head q/k norm), Phi-3 (fused weights, partial rotary, LongRoPE), OLMo-2 (post-norms,
    q/k norm over all heads)."""
    model_type = cfg.model_type
    common = _common(cfg, compute_dtype)
    types = _layer_types(cfg, model_type)
    rope_dim = common["head_dim"]
    if model_type == "phi3":  # the only one here whose rotary honours partial_rotary_factor
        legacy = _get(cfg, "partial_rotary_factor", default=1.0)
        rope_dim = int(rope_dim * rope_parameters(cfg).get("partial_rotary_factor", legacy))
    rope, dynamic = _rope_tables(cfg, types, rope_dim)
    bias = bool(getattr(cfg, "attention_bias", False)) and model_type not in ("mistral", "phi3")
    olmo = model_type in ("olmo2", "olmo3")
    qk_norm = {"qwen3": "head", "exaone4": "head"}.get(model_type, "heads" if olmo else None)
    rope_layers: tuple[bool, ...] = ()
    if model_type == "smollm3":  # 1 = rope on that layer, 0 = no position encoding (NoPE)
        rope_layers = tuple(bool(x) for x in cfg.no_rope_layers[: cfg.num_hidden_layers])
    elif model_type == "exaone4" and getattr(cfg, "sliding_window", None):  # rope on local layers
        rope_layers = tuple(t == "sliding_attention" for t in types)
    return ModelSpec(
        model_type=model_type,
        **common,
        intermediate_size=cfg.intermediate_size,
        norm="rms_f32" if olmo else "rms",
        norm_eps=float(cfg.rms_norm_eps),
        mlp="gated",
        activation=cfg.hidden_act,
        mlp_bias=bool(getattr(cfg, "mlp_bias", False)),
        qkv_bias=True if model_type == "qwen2" else bias,
        o_bias=bias and model_type != "qwen2",
        qk_norm=qk_norm,
        residual="post_norm" if olmo or model_type == "exaone4" else "sequential",
        sliding_window=_windows(cfg, types),
        attn_scale=(common["head_dim"] ** -0.5,) * cfg.num_hidden_layers,
        rope=rope,
        dynamic_rope=dynamic,
        rope_layers=rope_layers,
    )


def build_granite(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Granite: Llama with four multipliers (embeddings, residual branches, attention scores,
    logits divided by `logits_scaling`)."""
    spec = build_llama_like(cfg, compute_dtype)
    return dataclasses.replace(
        spec,
        embed_scale=float(cfg.embedding_multiplier),
        residual_scale=float(cfg.residual_multiplier),
        attn_scale=(float(cfg.attention_multiplier),) * cfg.num_hidden_layers,
        logit_scale=1.0 / float(cfg.logits_scaling),
    )


def build_cohere(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Cohere (Command-R) and Cohere-2: bias-free LayerNorm, one norm feeding attention and MLP in
    parallel, interleaved rope (the loader reorders q/k features: `hf_weights.deinterleave`),
    logits times `logit_scale`; Cohere's optional per-head q/k LayerNorms; Cohere-2's sliding
    layers, the only ones with rope."""
    model_type = cfg.model_type
    common = _common(cfg, compute_dtype)
    types = _layer_types(cfg, model_type)
    rope, dynamic = _rope_tables(cfg, types, common["head_dim"])
    bias = bool(getattr(cfg, "attention_bias", False))
    second = model_type == "cohere2"
    return ModelSpec(
        model_type=model_type,
        **common,
        intermediate_size=cfg.intermediate_size,
        norm="layer_nobias",
        norm_eps=float(cfg.layer_norm_eps),
        mlp="gated",
        activation=cfg.hidden_act,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm="per_head" if not second and getattr(cfg, "use_qk_norm", False) else None,
        residual="parallel_shared",
        sliding_window=_windows(cfg, types) if second else (0,) * cfg.num_hidden_layers,
        attn_scale=(common["head_dim"] ** -0.5,) * cfg.num_hidden_layers,
        logit_scale=float(cfg.logit_scale),
        rope=rope,
        dynamic_rope=dynamic,
        rope_layers=tuple(t == "sliding_attention" for t in types) if second else (),
    )


def build_starcoder2(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Starcoder2: LayerNorms with biases, a plain biased MLP, biased projections, a window on
    every layer when `sliding_window` is set."""
    common = _common(cfg, compute_dtype)
    types = _layer_types(cfg, "starcoder2")
    rope, dynamic = _rope_tables(cfg, types, common["head_dim"])
    bias = bool(getattr(cfg, "use_bias", True))
    return ModelSpec(
        model_type="starcoder2",
        **common,
        intermediate_size=cfg.intermediate_size,
        norm="layer",
        norm_eps=float(cfg.norm_epsilon),
        mlp="plain",
        activation=cfg.hidden_act,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        sliding_window=_windows(cfg, types),
        attn_scale=(common["head_dim"] ** -0.5,) * cfg.num_hidden_layers,
        rope=rope,
        dynamic_rope=dynamic,
    )


def build_falcon(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Falcon 7B/40B/180B (and the Falcon-3 Llama-style checkpoints, which declare `llama`):
    LayerNorms, a plain MLP, multi-query or grouped kv heads, parallel attention + MLP with one
    norm (7B) or two (`new_decoder_architecture`), or sequential. ALiBi variants are refused."""
    if getattr(cfg, "alibi", False):
        raise JaxevalError(
            "falcon with alibi=True (ALiBi position biases) is not supported",
            hint="Falcon-RW style checkpoints use ALiBi; rope Falcon checkpoints (7B/40B/180B) load",
        )
    heads, d = cfg.num_attention_heads, cfg.hidden_size
    new = bool(getattr(cfg, "new_decoder_architecture", False))
    if new:
        kv = cfg.num_kv_heads
    elif getattr(cfg, "multi_query", False):
        kv = 1
    else:
        kv = _get(cfg, "num_kv_heads", default=heads)
    parallel = bool(getattr(cfg, "parallel_attn", True))
    norms = _get(cfg, "num_ln_in_parallel_attn", default=2 if new else 1)
    if new and not parallel:
        raise JaxevalError(
            "falcon with new_decoder_architecture=True and parallel_attn=False is not supported",
            hint="that combination adds the attention output twice in transformers' Falcon",
        )
    if new and norms == 2:
        residual = "parallel"
    elif parallel:
        residual = "parallel_shared"
    else:
        residual = "sequential"
    n = cfg.num_hidden_layers
    head_dim = d // heads
    rope, dynamic = _rope_tables(cfg, ["full_attention"] * n, head_dim)
    bias = bool(getattr(cfg, "bias", False))
    return ModelSpec(
        model_type="falcon",
        vocab_size=cfg.vocab_size,
        hidden_size=d,
        num_layers=n,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=_get(cfg, "ffn_hidden_size", default=4 * d),
        max_position_embeddings=cfg.max_position_embeddings,
        tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", True)),
        compute_dtype=compute_dtype,
        norm="layer",
        norm_eps=float(cfg.layer_norm_epsilon),
        mlp="plain",
        activation=_get(cfg, "activation", default="gelu"),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        residual=residual,
        sliding_window=(0,) * n,
        attn_scale=(head_dim**-0.5,) * n,
        rope=rope,
        dynamic_rope=dynamic,
    )


def build_gemma(cfg: Any, compute_dtype: str) -> ModelSpec:
    """Gemma 1-3: (1 + w) RMSNorm, embeddings times sqrt(D), tanh-GELU; 2-3 add sandwich norms,
    soft-capping, sliding windows and `query_pre_attn_scalar`; 3 adds q/k norms and per-type rope."""
    model_type = cfg.model_type
    if getattr(cfg, "use_bidirectional_attention", False):
        raise JaxevalError(f"{model_type} with use_bidirectional_attention is not a causal LM")
    common = _common(cfg, compute_dtype)
    types = _layer_types(cfg, model_type)
    rope, dynamic = _rope_tables(cfg, types, common["head_dim"])
    activation = _get(cfg, "hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    if activation == "gelu":  # legacy Gemma configs mean the tanh approximation
        activation = "gelu_pytorch_tanh"
    later = model_type != "gemma"
    scalar = getattr(cfg, "query_pre_attn_scalar", None) if later else None
    scale = (scalar if scalar else common["head_dim"]) ** -0.5
    bias = bool(getattr(cfg, "attention_bias", False))
    return ModelSpec(
        model_type=model_type,
        **common,
        intermediate_size=cfg.intermediate_size,
        norm="rms_plus_one",
        norm_eps=float(cfg.rms_norm_eps),
        mlp="gated",
        activation=activation,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm="head" if model_type == "gemma3_text" else None,
        sandwich_norms=later,
        sliding_window=_windows(cfg, types) if later else (0,) * cfg.num_hidden_layers,
        attn_scale=(scale,) * cfg.num_hidden_layers,
        attn_softcap=getattr(cfg, "attn_logit_softcapping", None) if later else None,
        final_softcap=getattr(cfg, "final_logit_softcapping", None) if later else None,
        embed_scale=math.sqrt(cfg.hidden_size),
        rope=rope,
        dynamic_rope=dynamic,
    )


def build_gpt2(cfg: Any, compute_dtype: str) -> ModelSpec:
    """GPT-2: LayerNorm, learned absolute positions, biased Conv1D projections, tied head."""
    d, heads, n = cfg.n_embd, cfg.n_head, cfg.n_layer
    head_dim = d // heads
    base = head_dim**-0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
    by_layer = getattr(cfg, "scale_attn_by_inverse_layer_idx", False)
    return ModelSpec(
        model_type="gpt2",
        vocab_size=cfg.vocab_size,
        hidden_size=d,
        num_layers=n,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=head_dim,
        intermediate_size=cfg.n_inner or 4 * d,
        max_position_embeddings=cfg.n_positions,
        tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", True)),
        compute_dtype=compute_dtype,
        norm="layer",
        norm_eps=float(cfg.layer_norm_epsilon),
        mlp="plain",
        activation=cfg.activation_function,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        learned_positions=True,
        sliding_window=(0,) * n,
        attn_scale=tuple(base / (i + 1) if by_layer else base for i in range(n)),
    )


def build_gpt_neox(cfg: Any, compute_dtype: str) -> ModelSpec:
    """GPT-NeoX / Pythia: LayerNorm, parallel residual, partial rotary (`rotary_pct`)."""
    common = _common(cfg, compute_dtype)
    common["head_dim"] = cfg.hidden_size // cfg.num_attention_heads
    params = rope_parameters(cfg)
    partial = params.get("partial_rotary_factor", _get(cfg, "rotary_pct", default=1.0))
    rot_dim = int(common["head_dim"] * partial)
    types = ["full_attention"] * cfg.num_hidden_layers
    rope, dynamic = _rope_tables(cfg, types, rot_dim)
    bias = bool(getattr(cfg, "attention_bias", True))
    return ModelSpec(
        model_type="gpt_neox",
        **common,
        intermediate_size=cfg.intermediate_size,
        norm="layer",
        norm_eps=float(cfg.layer_norm_eps),
        mlp="plain",
        activation=cfg.hidden_act,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=True,
        residual="parallel" if getattr(cfg, "use_parallel_residual", True) else "sequential",
        sliding_window=(0,) * cfg.num_hidden_layers,
        attn_scale=(common["head_dim"] ** -0.5,) * cfg.num_hidden_layers,
        rope=rope,
        dynamic_rope=dynamic,
    )


def _moe_layers(cfg: Any, model_type: str) -> int:
    """The number of leading dense-MLP layers of an MoE config (the rest must all be MoE)."""
    n = cfg.num_hidden_layers
    if model_type in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        k = int(_get(cfg, "first_k_dense_replace", default=0))
        if int(_get(cfg, "moe_layer_freq", default=1)) != 1:
            raise JaxevalError(f"{model_type} with moe_layer_freq != 1 is not supported")
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        step = int(_get(cfg, "decoder_sparse_step", default=1))
        dense = [i for i in range(n) if i in set(cfg.mlp_only_layers or ()) or (i + 1) % step]
        k = len(dense)
        if dense != list(range(k)):
            raise JaxevalError(
                f"{model_type} with dense MLP layers {dense} is not supported",
                hint="only a run of dense layers at the start (mlp_only_layers=[0..k-1], "
                "decoder_sparse_step=1) loads",
            )
    else:
        k = 0
    if k >= n:
        raise JaxevalError(f"{model_type} config has no MoE layer ({k} dense of {n} layers)")
    return k


def moe_spec(cfg: Any) -> MoESpec:
    """The routing and expert shapes of an MoE config (semantics per family: `moe.py`)."""
    t = cfg.model_type
    k = int(cfg.num_experts_per_tok)
    if t in ("mixtral", "granitemoe", "gpt_oss"):
        x = int(cfg.num_local_experts)
    elif t in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        x = int(cfg.n_routed_experts)
    else:
        x = int(cfg.num_experts)
    f = int(_get(cfg, "moe_intermediate_size", default=cfg.intermediate_size))
    act = cfg.hidden_act
    if t == "mixtral":
        return MoESpec(
            num_experts=x, top_k=k, expert_size=f, norm_topk_prob=True, activation=act,
            router_dtype="hidden", weight_dtype="float32",
        )  # fmt: skip
    if t in ("qwen2_moe", "qwen3_moe", "olmoe"):
        shared = (
            int(_get(cfg, "shared_expert_intermediate_size", default=0)) if t == "qwen2_moe" else 0
        )
        return MoESpec(
            num_experts=x, top_k=k, expert_size=f, activation=act,
            norm_topk_prob=bool(getattr(cfg, "norm_topk_prob", False)),
            shared_size=shared, shared_gate=bool(shared),
            router_dtype="hidden", weight_dtype="hidden",
        )  # fmt: skip
    if t == "granitemoe":
        return MoESpec(
            num_experts=x, top_k=k, expert_size=f, activation=act, order="topk_then_softmax",
            router_dtype="hidden", weight_dtype="hidden",
        )  # fmt: skip
    if t == "gpt_oss":
        return MoESpec(
            num_experts=x, top_k=k, expert_size=f, order="topk_then_softmax", router_bias=True,
            expert_bias=True, activation="gpt_oss",
            swiglu_limit=float(_get(cfg, "swiglu_limit", default=7.0)),
            router_dtype="hidden", weight_dtype="hidden",
        )  # fmt: skip
    shared = int(_get(cfg, "n_shared_experts", default=0) or 0) * f
    scaling = float(_get(cfg, "routed_scaling_factor", default=1.0))
    if t == "deepseek_v2":
        grouped = _get(cfg, "topk_method", default="greedy") == "group_limited_greedy"
        return MoESpec(
            num_experts=x, top_k=k, expert_size=f, activation=act, routed_scaling_factor=scaling,
            n_group=int(cfg.n_group) if grouped else 1,
            topk_group=int(cfg.topk_group) if grouped else 1, group_score="max",
            shared_size=shared, router_dtype="float32", weight_dtype="float32",
        )  # fmt: skip
    return MoESpec(  # deepseek_v3, glm4_moe
        num_experts=x, top_k=k, expert_size=f, activation=act, scoring="sigmoid",
        norm_topk_prob=bool(getattr(cfg, "norm_topk_prob", True)), routed_scaling_factor=scaling,
        n_group=int(_get(cfg, "n_group", default=1)), topk_group=int(_get(cfg, "topk_group", default=1)),
        group_score="top2_sum", correction_bias=True, shared_size=shared,
        router_dtype="float32", weight_dtype="float32",
    )  # fmt: skip


def build_moe(cfg: Any, compute_dtype: str) -> ModelSpec:
    """The Mixture-of-Experts families: Llama-style attention (Mixtral's window, Qwen's biases
    and q/k norms, OLMoE's q/k norms over all heads, GLM-4.5's partial rotary, gpt-oss's biases,
    sinks and alternating windows, Granite's multipliers) or DeepSeek's latent attention, and the
    experts (`moe_spec`) on every layer after the dense ones."""
    t = cfg.model_type
    if getattr(cfg, "clip_qkv", None) is not None:
        raise JaxevalError(f"{t} with clip_qkv is not supported")
    dense_layers = _moe_layers(cfg, t)
    moe = moe_spec(cfg)
    if t in ("deepseek_v2", "deepseek_v3"):
        spec = build_llama_like(_WithType(cfg, "llama"), compute_dtype)
        return _mla(cfg, spec, moe, dense_layers)
    base = build_granite if t == "granitemoe" else build_llama_like
    spec = base(_WithType(cfg, t), compute_dtype)
    changes: dict[str, Any] = {"moe": moe, "dense_layers": dense_layers}
    if t == "olmoe":  # q/k norms over all heads, ordinary pre-norm layers
        changes.update(qk_norm="heads")
    elif t == "qwen2_moe":
        changes.update(qkv_bias=bool(getattr(cfg, "qkv_bias", True)), o_bias=False)
    elif t == "qwen3_moe":
        changes.update(qk_norm="head")
    elif t == "glm4_moe":
        partial = rope_parameters(cfg).get(
            "partial_rotary_factor", _get(cfg, "partial_rotary_factor", default=1.0)
        )
        rope, dynamic = _rope_tables(cfg, _layer_types(cfg, t), int(spec.head_dim * partial))
        changes.update(
            rope=rope,
            dynamic_rope=dynamic,
            qk_norm="head" if cfg.use_qk_norm else None,
            o_bias=False,
        )
    elif t == "gpt_oss":
        changes.update(attn_sinks=True, qkv_bias=True, o_bias=True)
    return dataclasses.replace(spec, **changes)


def _mla(cfg: Any, spec: ModelSpec, moe: MoESpec, dense_layers: int) -> ModelSpec:
    """DeepSeek-V2/V3: latent attention (`mla.py`), its rope over qk_rope_head_dim features, the
    softmax scale with YaRN's mscale folded in (as transformers' `yarn_apply_mscale`)."""
    rope_dim, nope_dim = int(cfg.qk_rope_head_dim), int(cfg.qk_nope_head_dim)
    head_dim = rope_dim + nope_dim
    n = cfg.num_hidden_layers
    rope, dynamic = _rope_tables(cfg, ["full_attention"] * n, rope_dim)
    scale = head_dim**-0.5
    params = rope_parameters(cfg)
    if params.get("rope_type", "default") != "default" and params.get("mscale_all_dim"):
        mscale = yarn_mscale(float(params["factor"]), float(params["mscale_all_dim"]))
        scale = scale * mscale * mscale
    mla = MLASpec(
        q_lora_rank=int(cfg.q_lora_rank or 0),
        kv_lora_rank=int(cfg.kv_lora_rank),
        rope_dim=rope_dim,
        nope_dim=nope_dim,
        v_dim=int(cfg.v_head_dim),
    )
    return dataclasses.replace(
        spec,
        model_type=cfg.model_type,
        num_kv_heads=spec.num_heads,
        head_dim=head_dim,
        qkv_bias=False,
        o_bias=False,
        qk_norm=None,
        rope=rope,
        dynamic_rope=dynamic,
        attn_scale=(scale,) * n,
        mla=mla,
        moe=moe,
        dense_layers=dense_layers,
    )


class _WithType:
    """A config read through another model_type's builder (attributes pass through)."""

    def __init__(self, cfg: Any, model_type: str):
        self._cfg = cfg
        self.model_type = model_type

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


def _text_config(cfg: Any) -> Any:
    text = getattr(cfg, "text_config", None)
    if text is None:
        raise JaxevalError(f"{cfg.model_type} config has no text_config")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """How to read one `model_type`: config -> spec, spec -> HF tensor sources, key aliases."""

    build: Callable[[Any, str], ModelSpec]
    weights: Callable[[ModelSpec], dict[str, Any]]
    aliases: tuple[tuple[str, str], ...]


_LLAMA = Family(
    build=build_llama_like,
    weights=hf_weights.llama_like,
    aliases=hf_weights.KEY_ALIASES["llama_like"],
)
_GEMMA = Family(
    build=build_gemma, weights=hf_weights.llama_like, aliases=hf_weights.KEY_ALIASES["llama_like"]
)
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "qwen3": _LLAMA,
    "olmo2": _LLAMA,
    "phi3": Family(
        build=build_llama_like,
        weights=hf_weights.phi3,
        aliases=hf_weights.KEY_ALIASES["llama_like"],
    ),
    "gemma": _GEMMA,
    "gemma2": _GEMMA,
    "gemma3_text": _GEMMA,
    # Gemma-3 image-text checkpoints: the text decoder only (`text_config`, `model.language_model.*`)
    "gemma3": dataclasses.replace(
        _GEMMA, build=lambda cfg, dtype: build_gemma(_text_config(cfg), dtype)
    ),
    "olmo3": _LLAMA,
    "smollm3": _LLAMA,
    "exaone4": _LLAMA,
    "granite": dataclasses.replace(_LLAMA, build=build_granite),
    "cohere": Family(
        build=build_cohere, weights=hf_weights.cohere, aliases=hf_weights.KEY_ALIASES["llama_like"]
    ),
    "cohere2": Family(
        build=build_cohere, weights=hf_weights.cohere, aliases=hf_weights.KEY_ALIASES["llama_like"]
    ),
    "starcoder2": Family(
        build=build_starcoder2,
        weights=hf_weights.starcoder2,
        aliases=hf_weights.KEY_ALIASES["llama_like"],
    ),
    "falcon": Family(
        build=build_falcon, weights=hf_weights.falcon, aliases=hf_weights.KEY_ALIASES["falcon"]
    ),
    **{
        t: Family(
            build=build_moe, weights=hf_weights.moe, aliases=hf_weights.KEY_ALIASES["llama_like"]
        )
        for t in (
            "mixtral",
            "qwen2_moe",
            "qwen3_moe",
            "olmoe",
            "granitemoe",
            "gpt_oss",
            "deepseek_v2",
            "deepseek_v3",
            "glm4_moe",
        )  # fmt: skip
    },
    "gpt2": Family(
        build=build_gpt2, weights=hf_weights.gpt2, aliases=hf_weights.KEY_ALIASES["gpt2"]
    ),
    "gpt_neox": Family(
        build=build_gpt_neox,
        weights=hf_weights.gpt_neox,
        aliases=hf_weights.KEY_ALIASES["gpt_neox"],
    ),
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(FAMILIES))

# model_type -> (checkpoints people evaluate, what the decoder does differently); the README's
# table of supported families is `families_markdown()` (regenerate it: python -m jaxeval.models)
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "llama": (
        "Llama 2/3/3.1/3.2, SmolLM2, Falcon-3, TinyLlama",
        "rope scaling: llama3, linear, dynamic, yarn",
    ),
    "mistral": ("Mistral 7B, Ministral", "sliding window"),
    "qwen2": ("Qwen2, Qwen2.5", "q/k/v biases"),
    "qwen3": ("Qwen3 dense", "per-head q/k RMSNorm"),
    "phi3": ("Phi-3, Phi-3.5, Phi-4-mini", "fused qkv and gate/up, partial rotary, LongRoPE"),
    "olmo2": ("OLMo-2", "post-norms, q/k norms over all heads"),
    "olmo3": ("OLMo-3", "OLMo-2 with sliding-window layers"),
    "gemma": ("Gemma", "(1 + w) norms, sqrt(D) embeddings"),
    "gemma2": ("Gemma-2", "sandwich norms, soft-capping, alternating windows"),
    "gemma3_text": ("Gemma-3 text (1B)", "q/k norms, local/global rope bases"),
    "gemma3": ("Gemma-3 4B-27B (text decoder)", "as gemma3_text, from the image-text checkpoint"),
    "granite": ("Granite 3.x dense", "embedding, residual, attention and logit multipliers"),
    "smollm3": ("SmolLM3", "no rope on every 4th layer (NoPE)"),
    "exaone4": ("EXAONE-4.0", "post-norms, rope on local layers only"),
    "cohere": (
        "Command-R, Aya",
        "parallel block, bias-free LayerNorm, interleaved rope, logit scale",
    ),
    "cohere2": ("Command-R7B, Command-A", "as cohere, rope on sliding layers only"),
    "starcoder2": ("StarCoder2", "LayerNorm, plain biased MLP, sliding window"),
    "falcon": ("Falcon 7B/40B/180B", "multi-query or grouped fused qkv, parallel block (no ALiBi)"),
    "gpt2": ("GPT-2", "learned positions, Conv1D weights"),
    "gpt_neox": ("Pythia, GPT-NeoX", "parallel residual, partial rotary"),
    "mixtral": ("Mixtral 8x7B, 8x22B", "MoE: softmax top-2, renormalised"),
    "qwen2_moe": ("Qwen1.5-MoE, Qwen2-57B-A14B", "MoE with a gated shared expert"),
    "qwen3_moe": ("Qwen3-30B-A3B, Qwen3-235B-A22B", "MoE top-8 of 128, q/k norms"),
    "olmoe": ("OLMoE-1B-7B", "MoE top-8 of 64, q/k norms over all heads"),
    "granitemoe": ("Granite 3.x MoE", "MoE top-k then softmax, Granite multipliers"),
    "gpt_oss": (
        "gpt-oss-20b, gpt-oss-120b",
        "MoE with biased experts and clamped SwiGLU, attention sinks, yarn",
    ),
    "deepseek_v2": (
        "DeepSeek-V2, V2-Lite, V2.5",
        "latent attention (MLA), grouped greedy routing, dense first layer",
    ),
    "deepseek_v3": (
        "DeepSeek-V3, DeepSeek-R1",
        "MLA, sigmoid routing with correction bias, groups, shared expert",
    ),
    "glm4_moe": ("GLM-4.5, GLM-4.5-Air", "sigmoid grouped routing, shared expert, partial rotary"),
}


def families_markdown(gguf: frozenset[str] = frozenset()) -> str:
    """The supported-families table (Markdown), one row per model_type of `FAMILIES`; `gguf`: the
    model_types that also load from GGUF files."""
    lines = [
        "| `model_type` | checkpoints | what differs from Llama | GGUF |",
        "|---|---|---|---|",
    ]
    for model_type in SUPPORTED_MODEL_TYPES:
        examples, notes = DESCRIPTIONS[model_type]
        lines.append(
            f"| `{model_type}` | {examples} | {notes} | {'yes' if model_type in gguf else ''} |"
        )
    return "\n".join(lines) + "\n"


def spec_from_config(cfg: Any, *, compute_dtype: str = "float32") -> ModelSpec:
    """The `ModelSpec` for a transformers config object (raises JaxevalError for other types)."""
    model_type = getattr(cfg, "model_type", None)
    if model_type not in FAMILIES:
        raise JaxevalError(
            f"model_type {model_type!r} is not supported",
            hint=f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    return FAMILIES[model_type].build(cfg, compute_dtype)
