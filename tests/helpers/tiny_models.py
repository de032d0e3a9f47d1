"""Tiny random Hugging Face checkpoints of every supported family, built offline with torch.

    make_tiny_checkpoint("gemma2", out_dir)      -> out_dir with config.json, model.safetensors, tokenizer
    tiny_checkpoint("gemma2")                    -> the same, built once per process and reused

Configs: 2 layers, width 64, 4 heads (2 kv heads where the family has GQA), vocabulary = the tiny
tokenizer's, max_position_embeddings 512, sliding windows of 8 (Mistral, Gemma-2/3) and 12 (Phi-3,
with partial rotary 0.5). Weights are
re-drawn from N(0, 0.2) (norm scales near 1) so that logits are far from uniform and greedy argmax
is meaningful. Keyword overrides go to the config class (e.g. `rope_scaling=...`, `sliding_window=4`).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from typing import Any

from jaxeval.demo.tiny import train_tokenizer

MOE_FAMILIES = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "olmoe",
    "granitemoe",
    "gpt_oss",
    "deepseek_v2",
    "deepseek_v3",
    "glm4_moe",
)
FAMILIES = (
    "llama",
    "llama3_rope",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "gpt2",
    "gpt_neox",
    "phi3",
    "olmo2",
    "olmo3",
    "granite",
    "smollm3",
    "exaone4",
    "cohere",
    "cohere2",
    "starcoder2",
    "falcon",
    "falcon_mqa",
    *MOE_FAMILIES,
)
TOKENIZER_STYLE = {"gpt2": "gpt2", "gpt_neox": "gpt2"}  # others: llama-style, BOS added
WINDOW = 8

TEXT = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Question: What is the capital of France?\nAnswer: Paris.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Water boils at 100 degrees Celsius at sea level; it freezes at 0 degrees.",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 plus minus times equals",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z a b c d e f g h i j k l m n o p",
    "Premise: All cats are mammals. Hypothesis: Some mammals are cats. Label: entailment.",
]


def _config(family: str, vocab: int, bos: int, eos: int, overrides: dict[str, Any]) -> Any:
    import transformers as tr

    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,
    )
    if family == "llama":
        kw = dict(common)
    elif family == "llama3_rope":
        kw = dict(
            common,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        family = "llama"
    elif family == "mistral":
        kw = dict(common, sliding_window=WINDOW, head_dim=16)
    elif family == "qwen2":
        kw = dict(common)
    elif family == "qwen3":
        kw = dict(common, head_dim=24)  # explicit head_dim != D / H
    elif family == "gemma":
        kw = dict(common, head_dim=16, tie_word_embeddings=True)
    elif family == "gemma2":
        kw = dict(
            common,
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=WINDOW,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=10.0,
            tie_word_embeddings=True,
        )
    elif family == "gemma3":
        kw = dict(
            common,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
            },
            tie_word_embeddings=True,
        )
    elif family == "phi3":
        kw = dict(
            common,
            sliding_window=12,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        )
    elif family == "olmo2":
        kw = dict(common)
    elif family == "olmo3":
        kw = dict(
            common, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]
        )
    elif family == "granite":
        kw = dict(
            common,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.2,
            logits_scaling=2.0,
            attention_bias=True,
        )
    elif family == "smollm3":
        kw = dict(common, no_rope_layers=[1, 0])  # layer 1 has no position encoding
    elif family == "exaone4":
        kw = dict(
            common, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]
        )
    elif family == "cohere":
        kw = dict(common, use_qk_norm=True, logit_scale=0.5, tie_word_embeddings=True)
    elif family == "cohere2":
        kw = dict(
            common,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            logit_scale=0.5,
            tie_word_embeddings=True,
        )
    elif family == "starcoder2":
        kw = dict(common, sliding_window=WINDOW, use_bias=True)
    elif family in ("falcon", "falcon_mqa"):
        kw = dict(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
            ffn_hidden_size=128,
            alibi=False,
            bos_token_id=bos,
            eos_token_id=eos,
            tie_word_embeddings=False,
        )
        if family == "falcon":  # Falcon-40B/180B style: 2 kv groups, two parallel norms, biases
            kw.update(new_decoder_architecture=True, num_kv_heads=2, bias=True)
        else:  # Falcon-7B style: one kv head, one norm feeding both branches
            kw.update(new_decoder_architecture=False, multi_query=True, parallel_attn=True)
        family = "falcon"
    elif family in MOE_FAMILIES:
        kw = dict(common, **_moe_config(family))
    elif family == "gpt2":
        kw = dict(
            vocab_size=vocab,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_positions=512,
            bos_token_id=bos,
            eos_token_id=eos,
        )
    elif family == "gpt_neox":
        kw = dict(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
            rotary_pct=0.25,
            bos_token_id=bos,
            eos_token_id=eos,
        )
    else:
        raise ValueError(f"unknown tiny family {family!r}; choose from {FAMILIES}")
    kw.update(overrides)
    classes = {
        "llama": tr.LlamaConfig,
        "mistral": tr.MistralConfig,
        "qwen2": tr.Qwen2Config,
        "qwen3": tr.Qwen3Config,
        "gemma": tr.GemmaConfig,
        "gemma2": tr.Gemma2Config,
        "gemma3": tr.Gemma3TextConfig,
        "gpt2": tr.GPT2Config,
        "gpt_neox": tr.GPTNeoXConfig,
        "phi3": tr.Phi3Config,
        "olmo2": tr.Olmo2Config,
        "olmo3": tr.Olmo3Config,
        "granite": tr.GraniteConfig,
        "smollm3": tr.SmolLM3Config,
        "exaone4": tr.Exaone4Config,
        "cohere": tr.CohereConfig,
        "cohere2": tr.Cohere2Config,
        "starcoder2": tr.Starcoder2Config,
        "falcon": tr.FalconConfig,
        "mixtral": tr.MixtralConfig,
        "qwen2_moe": tr.Qwen2MoeConfig,
        "qwen3_moe": tr.Qwen3MoeConfig,
        "olmoe": tr.OlmoeConfig,
        "granitemoe": tr.GraniteMoeConfig,
        "gpt_oss": tr.GptOssConfig,
        "deepseek_v2": tr.DeepseekV2Config,
        "deepseek_v3": tr.DeepseekV3Config,
        "glm4_moe": tr.Glm4MoeConfig,
    }
    return classes[family](**kw)


def _moe_config(family: str) -> dict[str, Any]:
    """8 experts, 2 per token, width 32; shared experts, groups, biases, dense first layers, latent
    attention and sinks where the family has them."""
    experts = dict(num_experts_per_tok=2)
    if family in ("mixtral", "granitemoe", "gpt_oss"):
        experts.update(num_local_experts=8, intermediate_size=32)
    elif family in ("qwen2_moe", "qwen3_moe", "olmoe"):
        experts.update(num_experts=8, norm_topk_prob=family != "qwen2_moe")
        if family == "olmoe":
            experts.update(intermediate_size=32)
        else:
            experts.update(moe_intermediate_size=32)
    else:  # deepseek_v2, deepseek_v3, glm4_moe: one dense layer first, shared experts, groups
        experts.update(
            n_routed_experts=8, moe_intermediate_size=32, n_shared_experts=1,
            first_k_dense_replace=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        )  # fmt: skip
    if family == "qwen2_moe":
        experts.update(shared_expert_intermediate_size=48)
    if family == "mixtral":
        experts.update(sliding_window=WINDOW)
    if family == "granitemoe":
        experts.update(
            embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
            logits_scaling=2.0,
        )  # fmt: skip
    if family == "gpt_oss":
        experts.update(
            head_dim=16, sliding_window=WINDOW, attention_bias=True,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": False, "original_max_position_embeddings": 64, "rope_theta": 150000.0,
            },
        )  # fmt: skip
    if family == "deepseek_v2":  # no q latent (V2-Lite), grouped greedy routing
        experts.update(
            num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=24, qk_rope_head_dim=8,
            qk_nope_head_dim=16, v_head_dim=12, topk_method="group_limited_greedy",
        )  # fmt: skip
    if family == "deepseek_v3":
        experts.update(
            num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=24, qk_rope_head_dim=8,
            qk_nope_head_dim=16, v_head_dim=12,
        )  # fmt: skip
    if family == "glm4_moe":
        experts.update(
            head_dim=16, use_qk_norm=True, attention_bias=True,
            rope_parameters={
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            },
        )  # fmt: skip
    return experts


def _reinitialise(model: Any, std: float) -> None:
    """N(0, std) on every weight and bias; norm scales near 1 (Gemma's (1 + w) norms: w near 0);
    DeepSeek/GLM's expert-choice correction bias N(0, std) too, so that it changes the choice."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            name = type(module).__name__
            is_norm = isinstance(module, torch.nn.LayerNorm) or "Norm" in name
            for pname, p in module.named_parameters(recurse=False):
                if is_norm:
                    centre = 0.0 if (pname == "bias" or name.startswith("Gemma")) else 1.0
                    p.copy_(centre + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, std)
            for bname, b in module.named_buffers(recurse=False):
                if bname == "e_score_correction_bias":
                    b.normal_(0.0, std)


def tokenizer_for(family: str, out_dir: str) -> str:
    """Trains the family's style of tiny tokenizer into `out_dir` (deterministic)."""
    style = TOKENIZER_STYLE.get(family, "llama")
    return train_tokenizer(TEXT, out_dir, style=style, vocab_size=512)


def make_tiny_checkpoint(
    family: str,
    out_dir: str,
    *,
    tokenizer_dir: str | None = None,
    seed: int = 0,
    std: float = 0.2,
    max_shard_size: str | None = None,
    **overrides: Any,
) -> str:
    """Writes a tiny random `family` checkpoint (safetensors + tokenizer) to `out_dir`; returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.makedirs(out_dir, exist_ok=True)
    if tokenizer_dir is None:
        tokenizer_dir = tokenizer_for(family, os.path.join(out_dir, "_tokenizer"))
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = _config(family, len(tok), tok.bos_token_id, tok.eos_token_id, overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _reinitialise(model, std)
    model.eval()
    save_kw = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(out_dir, **save_kw)
    tok.save_pretrained(out_dir)
    shutil.rmtree(os.path.join(out_dir, "_tokenizer"), ignore_errors=True)
    return out_dir


_ROOT: list[str] = []
_BUILT: dict[str, str] = {}


def _root() -> str:
    if not _ROOT:
        _ROOT.append(tempfile.mkdtemp(prefix="jaxeval-tiny-"))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return _ROOT[0]


def tiny_checkpoint(family: str, *, root: str | None = None, **kwargs: Any) -> str:
    """`make_tiny_checkpoint` built once per process (per family and arguments) and reused.

    Checkpoints live under `root` (default: a temporary directory removed at exit); the tokenizer of
    each style is trained once and shared.
    """
    root = root or _root()
    key = f"{root}|{family}|{json.dumps(kwargs, sort_keys=True, default=str)}"
    if key not in _BUILT:
        style = TOKENIZER_STYLE.get(family, "llama")
        tok_key = f"{root}|tokenizer|{style}"
        if tok_key not in _BUILT:
            _BUILT[tok_key] = tokenizer_for(family, os.path.join(root, f"tokenizer-{style}"))
        kwargs.setdefault("tokenizer_dir", _BUILT[tok_key])
        name = f"{family}-{len(_BUILT)}"
        _BUILT[key] = make_tiny_checkpoint(family, os.path.join(root, name), **kwargs)
    return _BUILT[key]


def load_torch_model(path: str) -> Any:
    """The transformers PyTorch model of a tiny checkpoint (float32, eager attention, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()
