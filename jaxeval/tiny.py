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
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
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
