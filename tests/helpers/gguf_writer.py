"""Writes a tiny HF checkpoint as a GGUF file the way llama.cpp's `convert_hf_to_gguf.py` does.

Independent of `jaxeval.models.gguf` on purpose: GGUF tensor names are spelled out here, and the
export conversions are applied forwards (llama q/k rows permuted per head; GPT-2 Conv1D weights
transposed to [out, in]), so reading the file back through jaxeval checks the inverse. transformers'
own GGUF loader reading the same file checks that these conventions are llama.cpp's.
"""

from __future__ import annotations

import json
import os

import numpy as np

ARCH = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2"}


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute`: per head, rows [2, E/2] stored as [E/2, 2]."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _tensors(model_type: str, cfg: dict, sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    if model_type == "gpt2":
        out["token_embd.weight"] = sd["transformer.wte.weight"]
        out["position_embd.weight"] = sd["transformer.wpe.weight"]
        out["output_norm.weight"] = sd["transformer.ln_f.weight"]
        out["output_norm.bias"] = sd["transformer.ln_f.bias"]
        names = {
            "ln_1": "attn_norm",
            "ln_2": "ffn_norm",
            "attn.c_attn": "attn_qkv",
            "attn.c_proj": "attn_output",
            "mlp.c_fc": "ffn_up",
            "mlp.c_proj": "ffn_down",
        }
        for i in range(cfg["n_layer"]):
            for hf, gg in names.items():
                w = sd[f"transformer.h.{i}.{hf}.weight"]
                out[f"blk.{i}.{gg}.weight"] = w.T.copy() if w.ndim == 2 else w
                out[f"blk.{i}.{gg}.bias"] = sd[f"transformer.h.{i}.{hf}.bias"]
        if "lm_head.weight" in sd and not cfg.get("tie_word_embeddings", True):
            out["output.weight"] = sd["lm_head.weight"]
        return out
    heads, kv = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
    )
    out["token_embd.weight"] = sd["model.embed_tokens.weight"]
    out["output_norm.weight"] = sd["model.norm.weight"]
    if not cfg.get("tie_word_embeddings", False):
        out["output.weight"] = sd["lm_head.weight"]
    names = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            for part in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{part}"
                if key not in sd:
                    continue
                w = sd[key]
                if model_type == "llama" and gg in ("attn_q", "attn_k"):
                    w = _permute(w, heads if gg == "attn_q" else kv)
                out[f"blk.{i}.{gg}.{part}"] = w
    return out


def write_gguf(hf_dir: str, out_path: str, *, name: str = "tiny") -> str:
    """Writes `hf_dir` (config.json + model.safetensors) as an F32 GGUF file at `out_path`."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    model_type = cfg["model_type"]
    arch = ARCH[model_type]
    sd = load_file(os.path.join(hf_dir, "model.safetensors"))
    w = gguf.GGUFWriter(out_path, arch)
    w.add_name(name)
    if model_type == "gpt2":
        w.add_block_count(cfg["n_layer"])
        w.add_context_length(cfg["n_positions"])
        w.add_embedding_length(cfg["n_embd"])
        w.add_feed_forward_length(cfg.get("n_inner") or 4 * cfg["n_embd"])
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    else:
        w.add_block_count(cfg["num_hidden_layers"])
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(cfg["hidden_size"])
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_head_count(cfg["num_attention_heads"])
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get(
            "rope_theta", 10000.0
        )
        w.add_rope_freq_base(float(theta))
        w.add_vocab_size(cfg["vocab_size"])
        if model_type == "llama":
            head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
            w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    for tname, value in _tensors(model_type, cfg, sd).items():
        w.add_tensor(tname, np.ascontiguousarray(value, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path
