"""A GGUF file's tokenizer as transformers builds it for `gguf_file=`, without torch.

transformers' GGUF tokenizer converter runs on the file's vocabulary, merges or scores; the result is
wrapped as a fast tokenizer with the file's special tokens and chat template. What the converter
cannot build is a named error: a BPE (`tokenizer.ggml.model` 'gpt2') or sentencepiece ('llama')
vocabulary needs `tokenizer.ggml.merges`, or `tokenizer.ggml.scores` to derive merges from; a special
token id must index the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.weights.gguf_file import GGUFFile

_SPECIAL_TOKENS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}


def load_tokenizer(f: GGUFFile, **overrides: Any) -> Any:
    """A fast tokenizer from the file's vocabulary, as transformers builds it for `gguf_file=`.

    `overrides` (e.g. `add_bos_token=True`) replace the file's tokenizer settings, as keyword
    arguments to `AutoTokenizer.from_pretrained` do.
    """
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    meta = f.metadata
    if "tokenizer.ggml.tokens" not in meta:
        raise JaxevalError(
            "this GGUF file has no tokenizer (no tokenizer.ggml.tokens)",
            file=f.path,
            hint="pass tokenizer=<a Hugging Face tokenizer dir> in --model_args",
        )
    grouped = {
        group: {
            new: meta[f"tokenizer.{old}"]
            for old, new in names.items()
            if f"tokenizer.{old}" in meta
        }
        for group, names in GGUF_TOKENIZER_MAPPING.items()
    }
    tokens, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokens.get("tokenizer_type") == "llama":  # sentencepiece files that do not say: BOS added
        tokenizer_config.setdefault("add_bos_token", True)
    vocab = tokens["tokens"]
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise JaxevalError(
            "tokenizer.ggml.tokens is not a list of strings",
            file=f.path,
            field="tokenizer.ggml.tokens",
            hint="the file is corrupt: download it again",
        )
    for name, key in _SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None and not (isinstance(token_id, int) and 0 <= token_id < len(vocab)):
            raise JaxevalError(
                f"token id {token_id!r} is not in the file's vocabulary of {len(vocab)}",
                file=f.path,
                field=f"tokenizer.ggml.{key}",
                hint="the file is corrupt: download it again",
            )
        tokenizer_config[name] = vocab[token_id] if token_id is not None else None
    backend, extra = _convert_tokenizer(f, tokens, convert_gguf_tokenizer)
    settings = {**tokenizer_config, **extra, **overrides}
    return PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path=f.path, **settings)


def _convert_tokenizer(f: GGUFFile, tokens: dict[str, Any], convert: Callable) -> Any:
    """transformers' converter on the file's vocabulary; what it cannot build is a named error:
    BPE and sentencepiece need `tokenizer.ggml.merges` or `tokenizer.ggml.scores` (merges are
    derived from the scores), a unigram vocabulary its scores."""
    kind = tokens.get("tokenizer_type")
    try:
        return convert(f.architecture, tokens)
    except KeyError as e:
        missing = e.args[0] if e.args else None
        if missing not in ("merges", "scores"):
            raise
        raise JaxevalError(
            f"the file's tokenizer (tokenizer.ggml.model {kind!r}) cannot be built: it has no "
            "tokenizer.ggml.merges and no tokenizer.ggml.scores to derive merges from",
            file=f.path,
            field="tokenizer.ggml.merges" if kind == "gpt2" else "tokenizer.ggml.scores",
            hint="use a GGUF file written with its full tokenizer (llama.cpp's "
            "convert_hf_to_gguf.py), or pass tokenizer=<a Hugging Face tokenizer dir> in "
            "--model_args",
        ) from None
    except ValueError as e:  # a tokenizer type transformers has no builder for
        raise JaxevalError(
            f"the file's tokenizer cannot be built ({e})",
            file=f.path,
            field="tokenizer.ggml.model",
            hint="pass tokenizer=<a Hugging Face tokenizer dir> in --model_args",
        ) from None
