"""The builders of configs with their own field names and layouts: Falcon and GPT-2.

Neither reads Llama's config fields (`n_embd`, `n_head`, `num_kv_heads`, `ffn_hidden_size`, ...)
and both decide structure from flags (Falcon: kv heads and the residual from three flags; GPT-2:
learned positions and a per-layer attention scale), so each keeps a small builder of its own. They
take no options (`options` is None in their rows).
"""

from __future__ import annotations

from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.families.config import config_value, rope_tables
from jaxeval.models.spec import ModelSpec


def build_falcon(cfg: Any, compute_dtype: str, options: None = None) -> ModelSpec:
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
        kv = config_value(cfg, "num_kv_heads", default=heads)
    parallel = bool(getattr(cfg, "parallel_attn", True))
    norms = config_value(cfg, "num_ln_in_parallel_attn", default=2 if new else 1)
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
    rope, dynamic = rope_tables(cfg, ["full_attention"] * n, head_dim)
    bias = bool(getattr(cfg, "bias", False))
    return ModelSpec(
        model_type="falcon",
        vocab_size=cfg.vocab_size,
        hidden_size=d,
        num_layers=n,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=config_value(cfg, "ffn_hidden_size", default=4 * d),
        max_position_embeddings=cfg.max_position_embeddings,
        tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", True)),
        compute_dtype=compute_dtype,
        norm="layer",
        norm_eps=float(cfg.layer_norm_epsilon),
        mlp="plain",
        activation=config_value(cfg, "activation", default="gelu"),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        residual=residual,
        sliding_window=(0,) * n,
        attn_scale=(head_dim**-0.5,) * n,
        rope=rope,
        dynamic_rope=dynamic,
    )


def build_gpt2(cfg: Any, compute_dtype: str, options: None = None) -> ModelSpec:
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
