"""Tiny local tokenizers and checkpoints, built offline, for the demo and the tests.

Nothing here downloads: a byte-level BPE tokenizer is trained with `tokenizers` on text the caller
passes, and saved with `transformers` so that `AutoTokenizer.from_pretrained(dir)` loads it exactly as
it would load a hub tokenizer. Two styles mirror the two BOS conventions lm-eval cares about:

    style="llama"  encode("hi") -> [<s>, h, i]   (BOS added by the tokenizer's post-processor)
    style="gpt2"   encode("hi") -> [h, i]        (no specials added; <|endoftext|> is bos/eos/unk)
"""

from __future__ import annotations

import os
from collections.abc import Iterable

SPECIALS = {
    "llama": {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "pad": None},
    "gpt2": {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>", "pad": None},
}


def train_tokenizer(
    texts: Iterable[str], out_dir: str, *, style: str = "llama", vocab_size: int = 512
) -> str:
    """Trains a byte-level BPE tokenizer on `texts` and saves it to `out_dir`; returns `out_dir`.

    Deterministic for the same texts and settings. Every string is encodable (byte fallback via the
    byte-level alphabet), so no request ever meets an unknown token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if style not in SPECIALS:
        raise ValueError(f"unknown tokenizer style {style!r}; use one of {sorted(SPECIALS)}")
    sp = SPECIALS[style]
    special_tokens = list(dict.fromkeys(t for t in sp.values() if t))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    if style == "llama":
        bos = sp["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=sp["bos"],
        eos_token=sp["eos"],
        unk_token=sp["unk"],
        model_max_length=int(1e30),
    )
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    return out_dir


def write_tiny_llama(
    out_dir: str,
    tokenizer_dir: str,
    *,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    max_position_embeddings: int = 512,
    std: float = 0.2,
) -> str:
    """Writes a random Llama checkpoint (config.json, model.safetensors, tokenizer) without torch.

    Weights are N(0, std) under the Hugging Face names (`model.layers.{i}.self_attn.q_proj.weight`,
    torch Linear layout [out, in]); RMSNorm scales are 1 + N(0, 0.1). The vocabulary is the
    tokenizer's, so `AutoModelForCausalLM` and `jaxeval.models.load_model` both read the result.
    """
    import shutil

    import numpy as np
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer, LlamaConfig

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    head_dim = hidden // heads
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    os.makedirs(out_dir, exist_ok=True)
    config.save_pretrained(out_dir)
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (std * rng.standard_normal(shape)).astype(np.float32)

    def scale(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal(len(tok), hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": scale(hidden),
                p + "self_attn.q_proj.weight": normal(heads * head_dim, hidden),
                p + "self_attn.k_proj.weight": normal(kv_heads * head_dim, hidden),
                p + "self_attn.v_proj.weight": normal(kv_heads * head_dim, hidden),
                p + "self_attn.o_proj.weight": normal(hidden, heads * head_dim),
                p + "post_attention_layernorm.weight": scale(hidden),
                p + "mlp.gate_proj.weight": normal(intermediate, hidden),
                p + "mlp.up_proj.weight": normal(intermediate, hidden),
                p + "mlp.down_proj.weight": normal(hidden, intermediate),
            }
        )
    tensors["model.norm.weight"] = scale(hidden)
    tensors["lm_head.weight"] = normal(len(tok), hidden)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    for name in os.listdir(tokenizer_dir):
        src = os.path.join(tokenizer_dir, name)
        if os.path.isfile(src) and not os.path.exists(os.path.join(out_dir, name)):
            shutil.copy(src, os.path.join(out_dir, name))
    return out_dir
