"""Writes a tiny HF checkpoint as a GGUF file the way llama.cpp's `convert_hf_to_gguf.py` does.

Independent of `jaxeval.models.weights.gguf` on purpose: GGUF tensor names are spelled out here, and the
export conversions are applied forwards (llama q/k rows permuted per head; GPT-2 Conv1D weights
transposed to [out, in]; experts stacked per layer; gpt-oss's fused experts split and transposed;
MXFP4 blocks repacked), so reading the file back through jaxeval checks the inverse. transformers'
own GGUF loader reading the same file checks that these conventions are llama.cpp's.

`write_mxfp4_variant` turns a tiny gpt-oss checkpoint into the Hub's MXFP4 layout (and a float
twin holding exactly the values the MXFP4 codes stand for).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

ARCH = {
    "llama": "llama",
    "qwen2": "qwen2",
    "gpt2": "gpt2",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "gpt_oss": "gpt-oss",
}
MOE = ("qwen2_moe", "qwen3_moe", "gpt_oss")
MXFP4 = 39  # GGML_TYPE_MXFP4


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute`: per head, rows [2, E/2] stored as [E/2, 2]."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _gpt2_tensors(cfg: dict, sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {
        "token_embd.weight": sd["transformer.wte.weight"],
        "position_embd.weight": sd["transformer.wpe.weight"],
        "output_norm.weight": sd["transformer.ln_f.weight"],
        "output_norm.bias": sd["transformer.ln_f.bias"],
    }
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


def _llama_tensors(model_type: str, cfg: dict, sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    out = {"token_embd.weight": sd["model.embed_tokens.weight"]}
    out["output_norm.weight"] = sd["model.norm.weight"]
    if not cfg.get("tie_word_embeddings", False):
        out["output.weight"] = sd["lm_head.weight"]
    names = {
        "input_layernorm": "attn_norm",
        # gpt-oss's llama.cpp name for the norm before its experts
        "post_attention_layernorm": "post_attention_norm"
        if model_type == "gpt_oss"
        else "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "self_attn.q_norm": "attn_q_norm",
        "self_attn.k_norm": "attn_k_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "mlp.gate": "ffn_gate_inp",  # Qwen-MoE router
        "mlp.router": "ffn_gate_inp",  # gpt-oss router
        "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
        "mlp.shared_expert.up_proj": "ffn_up_shexp",
        "mlp.shared_expert.down_proj": "ffn_down_shexp",
        "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
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
                # llama.cpp squeezes size-1 axes on export (the shared-expert gate [1, D] -> [D])
                out[f"blk.{i}.{gg}.{part}"] = np.squeeze(w) if w.ndim > 1 else w
        if f"model.layers.{i}.self_attn.sinks" in sd:  # gpt-oss: `sinks` -> `sinks.weight`
            out[f"blk.{i}.attn_sinks.weight"] = sd[f"model.layers.{i}.self_attn.sinks"]
    return out


def _stacked_experts(cfg: dict, sd: dict[str, np.ndarray], fuse: bool) -> dict[str, np.ndarray]:
    """Qwen-MoE: each layer's per-expert Linear weights stacked [X, F, D] / [X, D, F]
    (`Qwen2MoeModel.modify_tensors`); with `fuse`, gate and up as one [X, 2F, D], rows [gate | up]."""
    out = {}
    experts = cfg.get("num_experts") or cfg["num_local_experts"]
    for i in range(cfg["num_hidden_layers"]):
        stack = {
            proj: np.stack(
                [sd[f"model.layers.{i}.mlp.experts.{e}.{proj}_proj.weight"] for e in range(experts)]
            )
            for proj in ("gate", "up", "down")
        }
        out[f"blk.{i}.ffn_down_exps.weight"] = stack["down"]
        if fuse:
            out[f"blk.{i}.ffn_gate_up_exps.weight"] = np.concatenate(
                [stack["gate"], stack["up"]], axis=1
            )
        else:
            out[f"blk.{i}.ffn_gate_exps.weight"] = stack["gate"]
            out[f"blk.{i}.ffn_up_exps.weight"] = stack["up"]
    return out


def _repack_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF MXFP4 blocks [X, R, G, 16] + scales [X, R, G] -> GGML MXFP4 bytes [X, R, G*17].

    llama.cpp's `repack_mxfp4`: each block becomes its scale byte, then 16 bytes whose low nibbles
    are values 0-15 and high nibbles values 16-31 (HF bytes hold values 2j and 2j + 1).
    """
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    packed = codes[..., :16] | (codes[..., 16:] << 4)
    ggml = np.concatenate([scales[..., None], packed.astype(np.uint8)], axis=-1)
    return ggml.reshape(*ggml.shape[:2], -1)


def _gpt_oss_experts(
    cfg: dict, sd: dict[str, np.ndarray], fuse: bool
) -> dict[str, tuple[np.ndarray, int | None]]:
    """gpt-oss (`GptOssModel`): fused [X, D, 2F] experts (gate/up interleaved by column) split into
    gate and up [X, F, D], down [X, F, D] transposed to [X, D, F]; MXFP4 pairs repacked as is.
    Values are (array, raw GGML type or None)."""
    out: dict[str, tuple[np.ndarray, int | None]] = {}
    for i in range(cfg["num_hidden_layers"]):
        b, blk = f"model.layers.{i}.mlp.experts.", f"blk.{i}."
        if b + "down_proj_blocks" in sd:
            down = _repack_mxfp4(sd[b + "down_proj_blocks"], sd[b + "down_proj_scales"])
            blocks, scales = sd[b + "gate_up_proj_blocks"], sd[b + "gate_up_proj_scales"]
            gate = _repack_mxfp4(blocks[:, ::2], scales[:, ::2])
            up = _repack_mxfp4(blocks[:, 1::2], scales[:, 1::2])
            kind: int | None = MXFP4
        else:
            down = np.swapaxes(sd[b + "down_proj"], 1, 2)
            gate_up = np.swapaxes(sd[b + "gate_up_proj"], 1, 2)  # [X, 2F, D]
            gate, up, kind = gate_up[:, ::2], gate_up[:, 1::2], None
        out[blk + "ffn_down_exps.weight"] = (down, kind)
        out[blk + "ffn_down_exps.bias"] = (sd[b + "down_proj_bias"], None)
        bias = sd[b + "gate_up_proj_bias"]
        if fuse:
            out[blk + "ffn_gate_up_exps.weight"] = (np.concatenate([gate, up], axis=1), kind)
            out[blk + "ffn_gate_up_exps.bias"] = (
                np.concatenate([bias[:, ::2], bias[:, 1::2]], axis=-1),
                None,
            )
        else:
            out[blk + "ffn_gate_exps.weight"] = (gate, kind)
            out[blk + "ffn_up_exps.weight"] = (up, kind)
            out[blk + "ffn_gate_exps.bias"] = (bias[:, ::2], None)
            out[blk + "ffn_up_exps.bias"] = (bias[:, 1::2], None)
    return out


def _tensors(
    model_type: str, cfg: dict, sd: dict[str, np.ndarray], fuse: bool
) -> dict[str, tuple[np.ndarray, int | None]]:
    if model_type == "gpt2":
        plain = _gpt2_tensors(cfg, sd)
    else:
        plain = _llama_tensors(model_type, cfg, sd)
        if model_type in ("qwen2_moe", "qwen3_moe"):
            plain.update(_stacked_experts(cfg, sd, fuse))
    out = {name: (value, None) for name, value in plain.items()}
    if model_type == "gpt_oss":
        out.update(_gpt_oss_experts(cfg, sd, fuse))
    return out


def _add_metadata(w, model_type: str, cfg: dict) -> None:
    """`TextModel.set_gguf_parameters` and the MoE classes' additions, for our tiny configs."""
    import gguf

    if model_type == "gpt2":
        w.add_block_count(cfg["n_layer"])
        w.add_context_length(cfg["n_positions"])
        w.add_embedding_length(cfg["n_embd"])
        w.add_feed_forward_length(cfg.get("n_inner") or 4 * cfg["n_embd"])
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
        return
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rope = cfg.get("rope_parameters") or {}
    if rope.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        if "beta_fast" in rope:
            w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        if "beta_slow" in rope:
            w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_rope_freq_base(float(cfg.get("rope_theta") or rope.get("rope_theta", 10000.0)))
    w.add_vocab_size(cfg["vocab_size"])
    if model_type == "llama":
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(head_dim)
    if model_type in MOE:
        w.add_expert_count(cfg.get("num_local_experts") or cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if model_type in MOE and cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if model_type in ("qwen2_moe", "qwen3_moe"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if cfg.get("shared_expert_intermediate_size") is not None:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if model_type == "gpt_oss":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])


def write_gguf(
    hf_dir: str,
    out_path: str,
    *,
    name: str = "tiny",
    fuse_gate_up: bool = False,
    tokens: list[str] | None = None,
    merges: list[str] | None = None,
) -> str:
    """Writes `hf_dir` (config.json + model.safetensors) as a GGUF file at `out_path`: F32, except
    MXFP4 experts of an MXFP4 gpt-oss checkpoint, which stay MXFP4. `fuse_gate_up` writes experts'
    gate and up as one `ffn_gate_up_exps` tensor (llama.cpp's --fuse-gate-up-exps). `tokens`
    (default `t0`, `t1`, ...) and `merges` (default none) are the vocabulary: with merges, the
    file's own tokenizer can be built. The file names no BOS or EOS token either way."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    model_type = cfg["model_type"]
    sd = load_file(os.path.join(hf_dir, "model.safetensors"))
    w = gguf.GGUFWriter(out_path, ARCH[model_type])
    w.add_name(name)
    _add_metadata(w, model_type, cfg)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens or [f"t{i}" for i in range(cfg["vocab_size"])])
    if merges is not None:
        w.add_token_merges(merges)
    for tname, (value, kind) in _tensors(model_type, cfg, sd, fuse_gate_up).items():
        if kind is None:
            w.add_tensor(tname, np.ascontiguousarray(value, dtype=np.float32))
        else:
            w.add_tensor(
                tname, np.ascontiguousarray(value), raw_dtype=gguf.GGMLQuantizationType(kind)
            )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


def write_arch_only_gguf(out_path: str, arch: str, **metadata: int) -> str:
    """A GGUF file with just `general.architecture` (and integer `arch.key` metadata) and one
    tensor: enough to reach the architecture check."""
    import gguf

    w = gguf.GGUFWriter(out_path, arch)
    for key, value in metadata.items():
        w.add_uint32(f"{arch}.{key}", value)
    w.add_tensor("token_embd.weight", np.ones((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


def write_mxfp4_variant(gpt_oss_dir: str, out_dir: str, *, seed: int = 0) -> tuple[str, str]:
    """(mxfp4_dir, float_dir): `gpt_oss_dir`'s checkpoint with random MXFP4 experts.

    mxfp4_dir stores each layer's `experts.gate_up_proj` / `down_proj` as the Hub does, uint8
    `_blocks` [X, R, G, 16] and `_scales` [X, R, G] (with a `quantization_config`); float_dir holds
    the same model with those tensors as transformers dequantizes them (float32), so any correct
    MXFP4 reader loads the two to the same logits.
    """
    import torch
    from safetensors.numpy import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    rng = np.random.default_rng(seed)
    sd = load_file(os.path.join(gpt_oss_dir, "model.safetensors"))
    packed, dense = {}, {}
    for name, value in sd.items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            packed[name] = dense[name] = value
            continue
        x, cols, rows = value.shape  # HF [X, in, out]: blocks run along `in`
        blocks = rng.integers(0, 256, size=(x, rows, cols // 32, 16), dtype=np.uint8)
        scales = rng.integers(122, 126, size=(x, rows, cols // 32), dtype=np.uint8)  # 2^-5..2^-2
        packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
        values = convert_moe_packed_tensors(
            torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32
        )
        dense[name] = values.numpy()
    with open(os.path.join(gpt_oss_dir, "config.json")) as f:
        cfg = json.load(f)
    quantized = dict(cfg, quantization_config={"quant_method": "mxfp4"})
    dirs = (os.path.join(out_dir, "mxfp4"), os.path.join(out_dir, "float"))
    for path, tensors, config in zip(dirs, (packed, dense), (quantized, cfg)):
        os.makedirs(path, exist_ok=True)
        for extra in os.listdir(gpt_oss_dir):  # tokenizer files
            if extra not in ("config.json", "model.safetensors"):
                source = os.path.join(gpt_oss_dir, extra)
                if os.path.isfile(source):
                    shutil.copy(source, path)
        save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    return dirs
