"""The supported families, one row per `model_type`: the README's text, the builder and its options.

    FAMILIES["gemma2"].build(hf_config, compute_dtype="bfloat16") -> ModelSpec(...)
    FAMILIES["gemma2"].weights(spec) -> tree of hf_weights.Source, same structure as the params

A row (`family.Family`) says what the family does differently from Llama as values
(`dense.Decoder`, and `routing.Experts` for the MoE families); a family whose structure differs
names its own builder (`bespoke.build_falcon`, `bespoke.build_gpt2`, `moe.build_mla`). Adding a
family is adding a row (and its weight map in `weights/hf.py` where its checkpoint names differ
from Llama's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.families.bespoke import build_falcon, build_gpt2
from jaxeval.models.families.config import Field, When
from jaxeval.models.families.dense import Decoder
from jaxeval.models.families.family import Family
from jaxeval.models.families.moe import build_mla, build_moe
from jaxeval.models.families.routing import Experts
from jaxeval.models.spec import ModelSpec
from jaxeval.models.weights import hf as hf_weights

# Options that sibling families share: Gemma 1, 2, 3; OLMo-2, 3; Granite dense and MoE; Cohere 1, 2;
# the DeepSeek experts, and DeepSeek-V3's sigmoid routing that GLM-4.5 shares.
_GEMMA = Decoder(
    norm="rms_plus_one",
    activation="hidden_activation, gelu as tanh",
    mlp_bias=False,
    embed_scale="sqrt(hidden_size)",
    windowed=False,
    refuse_bidirectional=True,
)
_GEMMA2 = dataclasses.replace(
    _GEMMA,
    sandwich_norms=True,
    sliding="even",
    windowed=True,
    attn_scale="query_pre_attn_scalar**-0.5",
    attn_softcap=Field("attn_logit_softcapping", None),
    final_softcap=Field("final_logit_softcapping", None),
)
_GEMMA3 = dataclasses.replace(_GEMMA2, qk_norm="head", sliding="pattern")
_OLMO2 = Decoder(norm="rms_f32", qk_norm="heads", residual="post_norm")
_GRANITE = Decoder(
    attn_scale="attention_multiplier",
    embed_scale="embedding_multiplier",
    residual_scale="residual_multiplier",
    logit_scale="1/logits_scaling",
)
_COHERE = Decoder(
    norm="layer_nobias",
    norm_eps="layer_norm_eps",
    mlp_bias=False,
    residual="parallel_shared",
    logit_scale="logit_scale",
)
_DEEPSEEK_EXPERTS = Experts(
    count="n_routed_experts",
    dense_layers="first_k_dense_replace",
    shared="n_shared_experts",
    routed_scaling=True,
    router_dtype="float32",
    weight_dtype="float32",
)
_SIGMOID_EXPERTS = dataclasses.replace(
    _DEEPSEEK_EXPERTS,
    scoring="sigmoid",
    norm_topk_prob=Field("norm_topk_prob", True),
    groups="n_group",
    group_score="top2_sum",
    correction_bias=True,
)

ROWS: tuple[Family, ...] = (
    Family(
        model_type="llama",
        checkpoints="Llama 2/3/3.1/3.2, SmolLM2, Falcon-3, TinyLlama",
        differs="rope scaling: llama3, linear, dynamic, yarn",
    ),
    Family(
        model_type="mistral",
        checkpoints="Mistral 7B, Ministral",
        differs="sliding window",
        options=Decoder(sliding="all", qkv_bias=False, o_bias=False),
    ),
    Family(
        model_type="qwen2",
        checkpoints="Qwen2, Qwen2.5",
        differs="q/k/v biases",
        options=Decoder(sliding="after_max_window_layers", qkv_bias=True, o_bias=False),
    ),
    Family(
        model_type="qwen3",
        checkpoints="Qwen3 dense",
        differs="per-head q/k RMSNorm",
        options=Decoder(sliding="after_max_window_layers", qk_norm="head"),
    ),
    Family(
        model_type="olmo2",
        checkpoints="OLMo-2",
        differs="post-norms, q/k norms over all heads",
        options=_OLMO2,
    ),
    Family(
        model_type="phi3",
        checkpoints="Phi-3, Phi-3.5, Phi-4-mini",
        differs="fused qkv and gate/up, partial rotary, LongRoPE",
        options=Decoder(
            sliding="all", rotary_fraction="partial_rotary_factor", qkv_bias=False, o_bias=False
        ),
        weights=hf_weights.phi3,
    ),
    Family(
        model_type="gemma",
        checkpoints="Gemma",
        differs="(1 + w) norms, sqrt(D) embeddings",
        options=_GEMMA,
    ),
    Family(
        model_type="gemma2",
        checkpoints="Gemma-2",
        differs="sandwich norms, soft-capping, alternating windows",
        options=_GEMMA2,
    ),
    Family(
        model_type="gemma3_text",
        checkpoints="Gemma-3 text (1B)",
        differs="q/k norms, local/global rope bases",
        options=_GEMMA3,
    ),
    Family(  # the text decoder only (`text_config`, weights under `model.language_model.*`)
        model_type="gemma3",
        checkpoints="Gemma-3 4B-27B (text decoder)",
        differs="as gemma3_text, from the image-text checkpoint",
        options=_GEMMA3,
        text_config=True,
    ),
    Family(
        model_type="olmo3",
        checkpoints="OLMo-3",
        differs="OLMo-2 with sliding-window layers",
        options=_OLMO2,
    ),
    Family(
        model_type="smollm3",
        checkpoints="SmolLM3",
        differs="no rope on every 4th layer (NoPE)",
        options=Decoder(rope_layers="no_rope_layers"),
    ),
    Family(
        model_type="exaone4",
        checkpoints="EXAONE-4.0",
        differs="post-norms, rope on local layers only",
        options=Decoder(qk_norm="head", residual="post_norm", rope_layers="sliding_when_windowed"),
    ),
    Family(
        model_type="granite",
        checkpoints="Granite 3.x dense",
        differs="embedding, residual, attention and logit multipliers",
        options=_GRANITE,
    ),
    Family(
        model_type="cohere",
        checkpoints="Command-R, Aya",
        differs="parallel block, bias-free LayerNorm, interleaved rope, logit scale",
        options=dataclasses.replace(
            _COHERE, qk_norm=When(Field("use_qk_norm", False), "per_head"), windowed=False
        ),
        weights=hf_weights.cohere,
    ),
    Family(
        model_type="cohere2",
        checkpoints="Command-R7B, Command-A",
        differs="as cohere, rope on sliding layers only",
        options=dataclasses.replace(_COHERE, rope_layers="sliding"),
        weights=hf_weights.cohere,
    ),
    Family(
        model_type="starcoder2",
        checkpoints="StarCoder2",
        differs="LayerNorm, plain biased MLP, sliding window",
        options=Decoder(
            norm="layer",
            norm_eps="norm_epsilon",
            mlp="plain",
            mlp_bias=Field("use_bias", True),
            qkv_bias=Field("use_bias", True),
            o_bias=Field("use_bias", True),
            sliding="all",
        ),
        weights=hf_weights.starcoder2,
    ),
    Family(
        model_type="falcon",
        checkpoints="Falcon 7B/40B/180B",
        differs="multi-query or grouped fused qkv, parallel block (no ALiBi)",
        builder=build_falcon,
        options=None,
        weights=hf_weights.falcon,
        aliases=hf_weights.KEY_ALIASES["falcon"],
    ),
    Family(
        model_type="mixtral",
        checkpoints="Mixtral 8x7B, 8x22B",
        differs="MoE: softmax top-2, renormalised",
        builder=build_moe,
        options=Decoder(
            sliding="all",
            experts=Experts(
                count="num_local_experts",
                norm_topk_prob=True,
                router_dtype="hidden",
                weight_dtype="float32",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="qwen2_moe",
        checkpoints="Qwen1.5-MoE, Qwen2-57B-A14B",
        differs="MoE with a gated shared expert",
        builder=build_moe,
        options=Decoder(
            sliding="after_max_window_layers",
            qkv_bias=Field("qkv_bias", True),
            o_bias=False,
            experts=Experts(
                count="num_experts",
                dense_layers="mlp_only_layers",
                shared="shared_expert_intermediate_size",
                norm_topk_prob=Field("norm_topk_prob", False),
                router_dtype="hidden",
                weight_dtype="hidden",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="qwen3_moe",
        checkpoints="Qwen3-30B-A3B, Qwen3-235B-A22B",
        differs="MoE top-8 of 128, q/k norms",
        builder=build_moe,
        options=Decoder(
            sliding="all",
            qk_norm="head",
            experts=Experts(
                count="num_experts",
                dense_layers="mlp_only_layers",
                norm_topk_prob=Field("norm_topk_prob", False),
                router_dtype="hidden",
                weight_dtype="hidden",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="olmoe",
        checkpoints="OLMoE-1B-7B",
        differs="MoE top-8 of 64, q/k norms over all heads",
        builder=build_moe,
        options=Decoder(
            qk_norm="heads",
            experts=Experts(
                count="num_experts",
                norm_topk_prob=Field("norm_topk_prob", False),
                router_dtype="hidden",
                weight_dtype="hidden",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="granitemoe",
        checkpoints="Granite 3.x MoE",
        differs="MoE top-k then softmax, Granite multipliers",
        builder=build_moe,
        options=dataclasses.replace(
            _GRANITE,
            experts=Experts(
                count="num_local_experts",
                order="topk_then_softmax",
                router_dtype="hidden",
                weight_dtype="hidden",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="gpt_oss",
        checkpoints="gpt-oss-20b, gpt-oss-120b",
        differs="MoE with biased experts and clamped SwiGLU, attention sinks, yarn",
        builder=build_moe,
        options=Decoder(
            qkv_bias=True,
            o_bias=True,
            attn_sinks=True,
            experts=Experts(
                count="num_local_experts",
                order="topk_then_softmax",
                router_bias=True,
                expert_bias=True,
                activation="gpt_oss",
                swiglu_limit=True,
                router_dtype="hidden",
                weight_dtype="hidden",
            ),
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="deepseek_v2",
        checkpoints="DeepSeek-V2, V2-Lite, V2.5",
        differs="latent attention (MLA), grouped greedy routing, dense first layer",
        builder=build_mla,
        options=Decoder(
            experts=dataclasses.replace(_DEEPSEEK_EXPERTS, groups="group_limited_greedy")
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="deepseek_v3",
        checkpoints="DeepSeek-V3, DeepSeek-R1",
        differs="MLA, sigmoid routing with correction bias, groups, shared expert",
        builder=build_mla,
        options=Decoder(experts=_SIGMOID_EXPERTS),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="glm4_moe",
        checkpoints="GLM-4.5, GLM-4.5-Air",
        differs="sigmoid grouped routing, shared expert, partial rotary",
        builder=build_moe,
        options=Decoder(
            rotary_fraction="partial_rotary_factor",
            qk_norm=When(Field("use_qk_norm"), "head"),
            o_bias=False,
            experts=_SIGMOID_EXPERTS,
        ),
        weights=hf_weights.moe,
    ),
    Family(
        model_type="gpt2",
        checkpoints="GPT-2",
        differs="learned positions, Conv1D weights",
        builder=build_gpt2,
        options=None,
        weights=hf_weights.gpt2,
        aliases=hf_weights.KEY_ALIASES["gpt2"],
    ),
    Family(
        model_type="gpt_neox",
        checkpoints="Pythia, GPT-NeoX",
        differs="parallel residual, partial rotary",
        options=Decoder(
            norm="layer",
            norm_eps="layer_norm_eps",
            mlp="plain",
            mlp_bias=True,
            qkv_bias=Field("attention_bias", True),
            o_bias=Field("attention_bias", True),
            residual=When(Field("use_parallel_residual", True), "parallel", "sequential"),
            explicit_head_dim=False,
            read_layer_types=False,
            rotary_fraction="rotary_pct",
        ),
        weights=hf_weights.gpt_neox,
        aliases=hf_weights.KEY_ALIASES["gpt_neox"],
    ),
)
FAMILIES: dict[str, Family] = {row.model_type: row for row in ROWS}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(FAMILIES))

# The README's "TPU plan" column: every family's reduced config (2 layers, bf16) compiled for this
# slice by `jaxeval plan --topology`'s path (scoring buckets, prefill, decode; tests/
# test_tpu_families.py), except the model_types listed here with what fails (that test expects
# them to fail).
TPU_PLAN_TOPOLOGY = "v5e-8"
TPU_PLAN_FAILS: dict[str, str] = {}


def tpu_plan_outcome(model_type: str) -> str:
    """The README's "TPU plan" cell of `model_type`: "compiles (v5e-8)", or what fails."""
    if model_type in TPU_PLAN_FAILS:
        return f"fails ({TPU_PLAN_TOPOLOGY}): {TPU_PLAN_FAILS[model_type]}"
    return f"compiles ({TPU_PLAN_TOPOLOGY})"


def families_markdown(gguf: frozenset[str] = frozenset()) -> str:
    """The supported-families table (Markdown), one row per model_type of `FAMILIES`; `gguf`: the
    model_types that also load from GGUF files; the TPU plan column: `tpu_plan_outcome`."""
    lines = [
        "| `model_type` | checkpoints | what differs from Llama | GGUF | TPU plan |",
        "|---|---|---|---|---|",
    ]
    for model_type in SUPPORTED_MODEL_TYPES:
        row = FAMILIES[model_type]
        lines.append(
            f"| `{model_type}` | {row.checkpoints} | {row.differs} "
            f"| {'yes' if model_type in gguf else ''} | {tpu_plan_outcome(model_type)} |"
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
