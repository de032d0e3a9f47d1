"""The Mixture-of-Experts builders: the Llama-style spec of `dense.build_decoder` with a family's
experts (`routing.Experts`, held by `Decoder.experts`), and DeepSeek's latent attention (MLA) as
the one structural variant.

    build_moe(cfg, dtype, Decoder(qk_norm="head", experts=Experts(count="num_experts", ...)))
        -> the Llama-style spec of `dense.build_decoder` with `moe` and `dense_layers` set
    build_mla(cfg, dtype, Decoder(experts=Experts(count="n_routed_experts", ...)))
        -> the same with DeepSeek's latent attention in place of Llama's
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxeval.models.families.config import rope_parameters, rope_tables
from jaxeval.models.families.dense import Decoder, build_decoder
from jaxeval.models.families.routing import experts_and_dense_layers
from jaxeval.models.mla import MLASpec
from jaxeval.models.rope import yarn_mscale
from jaxeval.models.spec import ModelSpec


def build_moe(cfg: Any, compute_dtype: str, options: Decoder) -> ModelSpec:
    """The Mixture-of-Experts families with Llama-style attention (`options` as for
    `build_decoder`): the experts (`options.experts`) on every layer after the dense ones."""
    moe, dense_layers = experts_and_dense_layers(cfg, options.experts)
    spec = build_decoder(cfg, compute_dtype, options)
    return dataclasses.replace(spec, moe=moe, dense_layers=dense_layers)


def build_mla(cfg: Any, compute_dtype: str, options: Decoder) -> ModelSpec:
    """DeepSeek-V2/V3: latent attention (`mla.py`), its rope over qk_rope_head_dim features, the
    softmax scale with YaRN's mscale folded in (as transformers' `yarn_apply_mscale`), and the
    experts of `build_moe`."""
    moe, dense_layers = experts_and_dense_layers(cfg, options.experts)
    spec = build_decoder(cfg, compute_dtype, options)
    rope_dim, nope_dim = int(cfg.qk_rope_head_dim), int(cfg.qk_nope_head_dim)
    head_dim = rope_dim + nope_dim
    n = cfg.num_hidden_layers
    rope, dynamic = rope_tables(cfg, ["full_attention"] * n, rope_dim)
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
