"""Small, deliberately wrong model files: a one-layer llama GGUF whose metadata can say anything,
and copies of a tiny checkpoint with config.json fields replaced.

    write_llama_gguf(path)                              -> loads: 1 layer, width 64, 4 heads, 32 tokens
    write_llama_gguf(path, block_count=2**31)           -> its header claims 2**31 layers
    write_llama_gguf(path, alignment=0)                 -> general.alignment 0
    patched_checkpoint(tiny_dir, out, num_hidden_layers=64)  -> the weights, config.json changed
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 64, 4, 2, 128, 32
_UNSET = object()


def write_llama_gguf(
    path: str,
    *,
    block_count: Any = 1,
    head_count: Any = HEADS,
    head_count_kv: Any = KV_HEADS,
    embedding_length: Any = HIDDEN,
    context_length: Any = 128,
    vocab_size: Any = _UNSET,
    alignment: Any = _UNSET,
    tokenizer_model: str = "gpt2",
    merges: bool = True,
    scores: bool = False,
) -> str:
    """A llama GGUF holding one layer's F32 tensors (width 64, 4 heads of 16, 2 kv heads), whose
    metadata says what the keywords give (any value, of any type, is written as given)."""
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    put = {int: w.add_uint64, str: w.add_string, float: w.add_float32}
    for key, value in (
        ("llama.block_count", block_count),
        ("llama.attention.head_count", head_count),
        ("llama.attention.head_count_kv", head_count_kv),
        ("llama.embedding_length", embedding_length),
        ("llama.context_length", context_length),
        ("llama.vocab_size", vocab_size),
        ("general.alignment", alignment),
    ):
        if value is not _UNSET:
            put[type(value)](key, value)
    w.add_feed_forward_length(FFN)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model(tokenizer_model)
    w.add_token_list(["a", "b", "ab", *(f"t{i}" for i in range(3, VOCAB))])
    if merges:
        w.add_token_merges(["a b"])
    if scores:
        w.add_token_scores([-float(i) for i in range(VOCAB)])
    rng = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return (0.2 * rng.standard_normal(shape)).astype(np.float32)

    head_dim = HIDDEN // HEADS
    w.add_tensor("token_embd.weight", f(VOCAB, HIDDEN))
    w.add_tensor("output_norm.weight", 1 + f(HIDDEN))
    w.add_tensor("blk.0.attn_norm.weight", 1 + f(HIDDEN))
    w.add_tensor("blk.0.attn_q.weight", f(HEADS * head_dim, HIDDEN))
    w.add_tensor("blk.0.attn_k.weight", f(KV_HEADS * head_dim, HIDDEN))
    w.add_tensor("blk.0.attn_v.weight", f(KV_HEADS * head_dim, HIDDEN))
    w.add_tensor("blk.0.attn_output.weight", f(HIDDEN, HEADS * head_dim))
    w.add_tensor("blk.0.ffn_norm.weight", 1 + f(HIDDEN))
    w.add_tensor("blk.0.ffn_gate.weight", f(FFN, HIDDEN))
    w.add_tensor("blk.0.ffn_up.weight", f(FFN, HIDDEN))
    w.add_tensor("blk.0.ffn_down.weight", f(HIDDEN, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def patched_checkpoint(src: str, out: str, *, text: str | None = None, **fields: Any) -> str:
    """A copy of checkpoint `src` at `out` (weights linked) whose config.json has `fields` set
    (a field given as None is removed), or is the raw `text`."""
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(src):
        if name != "config.json":
            target = os.path.join(out, name)
            if not os.path.exists(target):
                os.symlink(os.path.join(src, name), target)
    if text is None:
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        for key, value in fields.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        text = json.dumps(config)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(text)
    return out
