"""Random-weight checkpoints with the exact shapes of real models, built offline, cached on disk.

    python bench/real_shapes.py smollm2-135m        -> ~/.cache/jaxeval/bench/smollm2-135m
    python bench/real_shapes.py llama-1b            -> ~/.cache/jaxeval/bench/llama-1b

Shapes (config.json as transformers writes it; `from_config` + `save_pretrained`, float32):

    smollm2-135m  llama, 30 layers, width 576, 9 heads / 3 kv heads, FFN 1536, vocab 49,152, tied,
                  rope_theta 100000, max_position_embeddings 8192                (134.5M params)
    llama-1b      Llama-3.2-1B: 16 layers, width 2048, 32 heads / 8 kv heads, FFN 8192,
                  vocab 128,256, tied, rope_theta 500000, max_position_embeddings 131072 (1.24B)
    qwen3-moe-1b  qwen3_moe: 16 layers, width 1024, 16 heads / 4 kv heads of 64, 32 experts of
                  width 512, 4 per token, q/k norms, vocab 151,936 (Qwen's), untied (1.13B,
                  0.36B active per token: Qwen3-30B-A3B's routing at a size this CPU runs)

The tokenizer is a byte-level BPE trained on the shared data (16,384 tokens, GPT-2 style: no BOS
added, `<|endoftext|>` is BOS/EOS, like SmolLM2's). Its ids are a prefix of the model's vocabulary;
the embedding and head keep the real vocabulary size, which is what sets their cost.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE = pathlib.Path(os.environ.get("JAXEVAL_BENCH_CACHE", "~/.cache/jaxeval/bench")).expanduser()
TOKENIZER_VOCAB = 16384

SHAPES = {
    "smollm2-135m": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
    "qwen3-moe-1b": dict(
        model_type="qwen3_moe",
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        moe_intermediate_size=512,
        num_experts=32,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
}


def _rows(path: pathlib.Path, n: int) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def tokenizer_dir() -> str:
    """The shared BPE tokenizer (trained once on WikiText, LAMBADA and ARC text)."""
    from jaxeval.demo.tiny import train_tokenizer

    out = CACHE / "tokenizer"
    if (out / "tokenizer.json").exists():
        return str(out)
    texts = [
        r["page"] for r in _rows(DATA / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl", 62)
    ]
    texts += [r["text"] for r in _rows(DATA / "lambada_openai/test.jsonl", 5153)]
    texts += [
        r["question"] + " " + " ".join(r["choices"]["text"])
        for r in _rows(DATA / "ai2_arc/ARC-Easy/validation.jsonl", 570)
    ]
    return train_tokenizer(texts, str(out), style="gpt2", vocab_size=TOKENIZER_VOCAB)


def build(name: str) -> str:
    """The checkpoint directory for `name`, written on first use (seeded random weights)."""
    out = CACHE / name
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return str(out)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir())
    shape = dict(SHAPES[name])
    config = AutoConfig.for_model(
        shape.pop("model_type", "llama"),
        **shape,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["smollm2-135m"]:
        print(build(arg))
