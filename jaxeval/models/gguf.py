"""A GGUF checkpoint as a Hugging Face one: transformers config, tokenizer and HF-named tensors.

lm-eval's HF backend loads GGUF through transformers (`pretrained=DIR,gguf_file=NAME.gguf`), which
needs torch. Here the same three things come from the file without torch:

- **config**: the file's metadata renamed with transformers' own GGUF key table
  (`GGUF_CONFIG_MAPPING`), the same rules transformers applies (mistral detection, tied embeddings
  when there is no `output.weight`, vocabulary size from the token list, Gemma-3 -> `gemma3_text`),
  then `AutoConfig.for_model`;
- **tokenizer**: transformers' GGUF tokenizer converter on the file's vocabulary and merges,
  wrapped as a fast tokenizer with the file's special tokens and chat template;
- **tensors**: `GGUFCheckpoint` answers HF tensor names (`model.layers.3.self_attn.q_proj.weight`)
  from GGUF ones (`blk.3.attn_q.weight`, via the `gguf` package's name map) and undoes llama.cpp's
  conversions, so the safetensors loader reads it unchanged:

      llama/mistral q, k  rows permuted per head: [h, 2, E/2] -> [h, E/2, 2] on export; undone here
      gemma2/3 norms      stored as 1 + w; undone (w = stored - 1)
      gpt2 Linear-like    stored [out, in]; HF Conv1D wants [in, out]: transposed back
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.models import hf_weights
from jaxeval.models.gguf_file import GGUFFile

# GGUF `general.architecture` -> the transformers model_type we build from it (our families).
GGUF_ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gpt2": "gpt2",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}
_SPECIAL_TOKENS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}


def resolve_gguf_path(pretrained: str, gguf_file: str | None) -> str | None:
    """The GGUF file to load, or None for a safetensors checkpoint.

    resolve_gguf_path("/m", "x.gguf") -> "/m/x.gguf";  resolve_gguf_path("/m/x.gguf", None) -> same
    """
    if gguf_file:
        path = gguf_file if os.path.isabs(gguf_file) else os.path.join(pretrained, gguf_file)
        if not os.path.isfile(path):
            raise JaxevalError(
                f"gguf_file {gguf_file!r} not found in {pretrained!r}",
                field="gguf_file",
                hint="pretrained=DIR names the folder and gguf_file=NAME.gguf the file inside it "
                "(or pass pretrained=/path/to/model.gguf)",
            )
        return os.path.abspath(path)
    if pretrained.endswith(".gguf"):
        if not os.path.isfile(pretrained):
            raise JaxevalError(
                "GGUF file not found", file=pretrained, hint="check the path to the .gguf file"
            )
        return os.path.abspath(pretrained)
    return None


def gguf_architecture(f: GGUFFile) -> str:
    """The model_type a file's architecture maps to; a clear error when it maps to none of ours."""
    arch = f.architecture
    if arch not in GGUF_ARCHITECTURES:
        raise JaxevalError(
            f"GGUF architecture {arch!r} is not supported",
            file=f.path,
            hint=f"supported GGUF architectures: {', '.join(GGUF_ARCHITECTURES)} "
            "(other families load from safetensors checkpoints)",
        )
    return arch


def config_dict(f: GGUFFile) -> dict[str, Any]:
    """The transformers config dict for this file, renamed exactly as transformers does."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = gguf_architecture(f)
    name = f.metadata.get("general.name")
    # transformers compares the name as a one-element list, so only the exact name "mistral" counts
    updated = "mistral" if "llama" in arch and name == "mistral" else arch
    config: dict[str, Any] = {
        "tie_word_embeddings": "output.weight" not in f.tensors,
    }
    for key, value in (GGUF_CONFIG_DEFAULTS_MAPPING.get(updated) or {}).items():
        config.setdefault(key, value)
    for key, value in f.metadata.items():
        key = key.replace(arch, updated)
        prefix, _, rest = key.partition(".")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if renamed is not None and renamed != -1:
            config[renamed] = value
    if config.get("model_type") == "gpt2" and "n_ctx" in config:
        # GGUF's context_length is GPT-2's position table; transformers' table maps it only to n_ctx,
        # which leaves n_positions at 1024 and breaks any file with another table size.
        config.setdefault("n_positions", config["n_ctx"])
    if config.get("model_type") == "gemma3":
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in f.metadata:
        config["vocab_size"] = len(f.metadata["tokenizer.ggml.tokens"])
    return config


def load_config(f: GGUFFile) -> Any:
    from transformers import AutoConfig

    config = dict(config_dict(f))
    return AutoConfig.for_model(config.pop("model_type"), **config)


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
    for name, key in _SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        tokenizer_config[name] = tokens["tokens"][token_id] if token_id is not None else None
    backend, extra = convert_gguf_tokenizer(f.architecture, tokens)
    settings = {**tokenizer_config, **extra, **overrides}
    return PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path=f.path, **settings)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k export permutation undone.

    Export (`convert_hf_to_gguf.py`) viewed each head's E rows as [2, E/2] and stored them as
    [E/2, 2] (rotate-half order -> interleaved pairs); here each head's rows are viewed as [E/2, 2]
    and put back as [2, E/2]. Head rows 0..3 (E = 4): HF [0 1 2 3] -> GGUF [0 2 1 3] -> HF [0 1 2 3].
    """
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFCheckpoint:
    """`CheckpointReader`'s interface (`in`, `shape`, `read`) over a GGUF file, by HF tensor name."""

    _GPT2_TRANSPOSED = ("attn_qkv.weight", "ffn_down.weight", "ffn_up.weight", "attn_output.weight")

    def __init__(self, f: GGUFFile, hf_config: Any):
        import gguf

        self.file, self.path = f, f.path
        f.check_types()
        arch = f.architecture
        arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
        self._names = gguf.get_tensor_name_map(arch_id, int(hf_config.num_hidden_layers))
        self._arch = arch
        self._heads = int(hf_config.num_attention_heads)
        self._kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or self._heads)

    def gguf_name(self, hf_name: str) -> str | None:
        base, dot, suffix = hf_name.rpartition(".")
        if not dot:
            return None
        found = self._names.get_name(base)
        if found is None:
            return None
        name = f"{found}.{suffix}"
        return name if name in self.file else None

    def __contains__(self, hf_name: str) -> bool:
        return self.gguf_name(hf_name) is not None

    def _transposed(self, name: str) -> bool:
        return self._arch == "gpt2" and name.endswith(self._GPT2_TRANSPOSED)

    def shape(self, hf_name: str) -> tuple[int, ...]:
        name = self.gguf_name(hf_name)
        shape = self.file.shape(name)
        return tuple(reversed(shape)) if self._transposed(name) else shape

    def read(self, hf_name: str, rows: slice | None = None) -> np.ndarray:
        """The HF-layout float32 tensor (or rows `rows`), llama.cpp's export conversions undone."""
        name = self.gguf_name(hf_name)
        if name is None:
            raise KeyError(hf_name)
        permute = self._arch == "llama" and (".attn_q." in name or ".attn_k." in name)
        whole = permute or self._transposed(name)
        w = self.file.read(name, None if whole else rows)
        if permute:
            w = _unpermute(w, self._heads if ".attn_q." in name else self._kv_heads)
        if self._transposed(name):
            w = hf_weights.transpose(w)
        if self._arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        if whole and rows is not None:
            w = w[rows]
        return w
