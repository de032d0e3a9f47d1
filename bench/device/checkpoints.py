"""Random-weight Llama checkpoints at real shapes, and a tokenizer of their exact vocabulary, built on
the machine that runs them (nothing is downloaded, nothing large travels).

    python bench/device/checkpoints.py llama-1b /tmp/work/llama-1b --dtype bfloat16 --device cuda

Shapes:

    tiny      2 layers, width 128, 4 heads / 2 kv heads, FFN 256, vocab 4,096 (the CPU mode's)
    llama-1b  Llama-3.2-1B: 16 layers, width 2048, 32 / 8 heads of 64, FFN 8192, vocab 128,256, tied
              (bench/real_shapes.py)
    llama-8b  Llama-3-8B: 32 layers, width 4096, 32 / 8 heads of 128, FFN 14336, vocab 128,256
              (configs/models/llama-3-8b/config.json)

The model: transformers' `from_config` (its own initializer, seeded) created directly on `device`
in `dtype`, then `save_pretrained` (safetensors). The tokenizer: a byte-level BPE trained on the
bundled rows (`jaxeval.demo.tiny.train_tokenizer`, Llama style: BOS added), its vocabulary padded with
filler tokens (`zqa`, `zqb`, ...: plain letters, so every id decodes to text) to exactly the model's
vocabulary size, so that any id a random model generates is a real token for both tools.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from real_shapes import SHAPES as REAL_SHAPES  # noqa: E402

_LLAMA_8B = REPO / "configs" / "models" / "llama-3-8b" / "config.json"
_SHAPE_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta", "rms_norm_eps",
    "tie_word_embeddings",
)  # fmt: skip
BPE_VOCAB = 2048  # merges learned from the rows; fillers make up the rest


def shape(name: str) -> dict:
    """The config keys of model `name` (module docstring)."""
    if name == "tiny":
        return dict(
            vocab_size=4096, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        )  # fmt: skip
    if name == "llama-1b":
        return dict(REAL_SHAPES["llama-1b"])
    if name == "llama-8b":
        config = json.loads(_LLAMA_8B.read_text())
        out = {k: config[k] for k in _SHAPE_KEYS if k in config}
        out.setdefault("head_dim", out["hidden_size"] // out["num_attention_heads"])
        return out
    raise ValueError(f"unknown model {name!r}: tiny, llama-1b or llama-8b")


def flop_params(s: dict) -> int:
    """Parameters that take part in a token's matmuls: the layers and the LM head (the input
    embedding is a gather). 2 x this is the model FLOPs per token (attention's q.k and p.v aside)."""
    d, f, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    h, g = s["num_attention_heads"], s["num_key_value_heads"]
    e = s.get("head_dim") or d // h
    layer = d * (h * e + 2 * g * e) + h * e * d + 3 * d * f + 2 * d
    return s["num_hidden_layers"] * layer + d + v * d


def kv_bytes_per_token(s: dict, dtype_bytes: int) -> int:
    """KV-cache bytes of one token, all layers (keys and values)."""
    e = s.get("head_dim") or s["hidden_size"] // s["num_attention_heads"]
    return s["num_hidden_layers"] * 2 * s["num_key_value_heads"] * e * dtype_bytes


def _texts(data: pathlib.Path) -> list[str]:
    def rows(rel: str) -> list[dict]:
        return [json.loads(line) for line in open(data / rel, encoding="utf-8")]

    texts = [r["text"] for r in rows("lambada_openai/test.jsonl")]
    texts += [r["question"] + "\n" + r["answer"] for r in rows("gsm8k/train.jsonl")]
    texts += [
        r["question"] + " " + " ".join(r["choices"]["text"])
        for r in rows("ai2_arc/ARC-Easy/validation.jsonl")
    ]
    return texts


def _filler(i: int) -> str:
    letters = ""
    while True:
        i, r = divmod(i, 26)
        letters += chr(ord("a") + r)
        if i == 0:
            return "zq" + letters


def build_tokenizer(out: pathlib.Path, vocab_size: int, data: pathlib.Path) -> pathlib.Path:
    """A Llama-style BPE tokenizer of exactly `vocab_size` ids in `out` (module docstring)."""
    from jaxeval.demo.tiny import train_tokenizer

    if (out / "tokenizer.json").exists():
        return out
    train_tokenizer(_texts(data), str(out), style="llama", vocab_size=min(BPE_VOCAB, vocab_size))
    path = out / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    taken = set(vocab) | {t["content"] for t in spec.get("added_tokens", [])}
    used = max(vocab.values()) + 1
    i = 0
    while used < vocab_size:
        token = _filler(i)
        i += 1
        if token not in taken:
            vocab[token] = used
            used += 1
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return out


def build_model(
    name: str, out: pathlib.Path, data: pathlib.Path, *, dtype: str, device: str
) -> dict:
    """Writes model `name` (random weights) and its tokenizer to `out`; returns a summary."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    s = shape(name)
    tok_dir = build_tokenizer(out.parent / f"tokenizer-{s['vocab_size']}", s["vocab_size"], data)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    if len(tok) != s["vocab_size"]:
        raise RuntimeError(f"tokenizer has {len(tok)} ids, the model {s['vocab_size']}")
    config = AutoConfig.for_model(
        "llama", **s, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    n_params = sum(p.numel() for p in model.parameters())
    built = time.perf_counter() - start
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    del model
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    return {
        "model": name, "path": str(out), "dtype": dtype, "params": n_params,
        "flop_params": flop_params(s), "safetensors_bytes": size, "build_s": built,
        "save_s": time.perf_counter() - start - built,
    }  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("out")
    ap.add_argument("--data", default=str(REPO / "tests" / "data"))
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    print(json.dumps(build_model(a.name, pathlib.Path(a.out), pathlib.Path(a.data), dtype=a.dtype,
                                 device=a.device)))  # fmt: skip
