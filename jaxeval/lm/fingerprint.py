"""What the response cache (`--use_cache`) keys a JaxLM's answers by: everything that can change one.

    answer_args(JaxLMConfig.from_kwargs({"pretrained": "/m", "add_bos_token": False, "batch_size": 8}))
    -> {"add_bos_token": False, "dtype": "auto", ..., "max_gen_toks": 256, "pretrained": "/m", ...}
       (no "batch_size": a performance knob, listed in PERFORMANCE_ARGS)

A model's fingerprint (`JaxLM.fingerprint`) hashes these parts:

    weights    the checkpoint's files (a folder: every file directly inside it) and the tokenizer's:
               weights (*.safetensors, *.gguf, ...) by name, size and mtime, or by a sha256 of their
               bytes with `cache_hash_weights=True`; every other file (config.json,
               generation_config.json, tokenizer files) by a sha256 of its bytes
    config     the transformers config as loaded (config.json's fields, or a GGUF's metadata)
    spec       the model as built from it (`ModelSpec`: every field the kernels read)
    tokenizer  its class, name, size, special ids and BOS/EOS flags
    args       every model argument except PERFORMANCE_ARGS (generation settings included)
    resolved   the parameters' dtype, max_length, prefix and EOS ids as this run resolved them

A same-size weight swap that keeps the mtime (`cp -p`, `rsync -a`) is seen only with
`cache_hash_weights=True` (it reads every weight byte once per run: about 1 s per GB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from jaxeval.lm.generate.config import GenConfig
from jaxeval.lm.model_config import GEN_ARGS, JaxLMConfig

# Model arguments that choose how answers are computed, never what they are: the only ones left
# out of the fingerprint. Every other argument (`JaxLMConfig.names()`) is in it, so a new argument
# changes the fingerprint until it is classified here (tests/lm/test_cache_fingerprint.py).
PERFORMANCE_ARGS = frozenset(
    {
        "batch_size",  # scoring rows are packed by token budget; generation rows are independent
        "max_batch_size",  # the cap of batch_size=auto
        "mesh",  # where the arrays live; the same kernels on any mesh (tests/lm/test_invariance.py)
        "token_budget",  # tokens per scoring batch
        "buckets",  # the padded batch shapes requests are packed into
        "packing",  # several requests per row, each behind its own segment mask
        "shared_context",  # a context shared by continuations scored once, same attention
        "vocab_chunk",  # the log-softmax's vocabulary chunk width (an exact running logsumexp)
        "compilation_cache",  # where compiled executables are kept
        "attention",  # the attention backend: the same mask and math on another kernel
        "experts",  # the Mixture-of-Experts backend: the same experts' grouped matmuls
        "cache_hash_weights",  # how this fingerprint identifies the weights files
        "gen_batch_size",  # generation rows per batch (settings and PRNG keys are per row)
        "gen_continuous",  # continuous batching or static batches
        "gen_min_prefix",  # shared prompt prefixes prefilled once
        "gen_refill_rows",  # free rows that end a decode chunk
        "gen_admission",  # the order queued requests start in
        "gen_tail",  # the queue's tail decodes in smaller engines
        "gen_shrink_last_batch",  # each shape's last static batch cut to its rows
    }
)
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")
WEIGHT_SUFFIXES += (".npz", ".npy")
# Files larger than this are identified like weights (size and mtime), whatever their name.
CONTENT_HASH_LIMIT = 1 << 28  # 256 MiB


def stable(value: Any) -> Any:
    """A JSON-able form of `value` that is the same in every process (no object addresses)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy / jax scalar
        return stable(value.item())
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # an array: its type, not its bytes
        return ["array", str(value.dtype), list(value.shape)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: stable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__qualname__, **fields}
    if isinstance(value, Mapping):
        return {str(k): stable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [stable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((stable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if callable(value):
        name = getattr(value, "__qualname__", type(value).__qualname__)
        return f"{getattr(value, '__module__', '')}.{name}"
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


def answer_args(config: JaxLMConfig) -> dict[str, Any]:
    """The model arguments in the fingerprint: all but PERFORMANCE_ARGS, by `--model_args` name
    (`generation`'s fields under their GEN_ARGS names, batch size resolved). A loaded model or a
    tokenizer object stands as its type: its identity is the fingerprint's weights and tokenizer."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    values.pop("generation")
    gen: GenConfig = config.gen_config
    values.update({arg: getattr(gen, field) for arg, field in GEN_ARGS.items()})
    for name in ("pretrained", "tokenizer"):
        if values[name] is not None and not isinstance(values[name], str):
            values[name] = type(values[name]).__qualname__
    return {k: stable(v) for k, v in sorted(values.items()) if k not in PERFORMANCE_ARGS}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _one_file(path: str, hash_weights: bool) -> list:
    st = os.stat(path)
    weights = path.endswith(WEIGHT_SUFFIXES) or st.st_size > CONTENT_HASH_LIMIT
    if weights and not hash_weights:
        return [st.st_size, st.st_mtime_ns]
    return [st.st_size, _sha256(path)]


def file_identity(path: str, *, hash_weights: bool = False) -> list:
    """[path, size, mtime or sha256] of a file, or [path, [[name, size, ...], ...]] of every file
    directly inside a folder; [] if absent. Weights are known by (size, mtime_ns), or by their
    sha256 with `hash_weights`; every other file by its sha256.

    ckpt/ -> ["/abs/ckpt", [["config.json", 612, "sha256:9f..."],
                            ["model.safetensors", 53312, 1717171717000000000], ...]]
    """
    if not path or not os.path.exists(path):
        return []
    if os.path.isfile(path):
        return [os.path.abspath(path), *_one_file(path, hash_weights)]
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            out.append([name, *_one_file(full, hash_weights)])
    return [os.path.abspath(path), out]


def files_identity(paths: list[str], *, hash_weights: bool = False) -> list:
    """`file_identity` of each distinct existing path (a tokenizer inside the checkpoint: once)."""
    seen: list[str] = []
    for path in paths:
        if path and os.path.exists(path) and os.path.abspath(path) not in seen:
            seen.append(os.path.abspath(path))
    return [file_identity(p, hash_weights=hash_weights) for p in seen]


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """What the tokenizer object says of itself; a tokenizer not read from files adds a digest
    of its vocabulary (files are identified by their bytes in `files_identity`)."""
    out: dict[str, Any] = {
        "class": type(tokenizer).__qualname__,
        "name": str(getattr(tokenizer, "name_or_path", "")),
        "size": len(tokenizer),
    }
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        out[attr] = stable(getattr(tokenizer, attr, None))
    for attr in ("add_bos_token", "add_eos_token", "padding_side", "truncation_side"):
        if hasattr(tokenizer, attr):
            out[attr] = stable(getattr(tokenizer, attr))
    if not os.path.exists(out["name"]) and callable(getattr(tokenizer, "get_vocab", None)):
        vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
        out["vocab"] = hashlib.sha256(vocab.encode("utf-8")).hexdigest()
    return out


def spec_identity(spec: Any) -> Any:
    """The built model: a dataclass spec field by field; another model object by its public
    attributes (functions by their qualified names)."""
    if dataclasses.is_dataclass(spec):
        return stable(spec)
    attrs = {k: v for k, v in vars(spec).items() if not k.startswith("_")}
    return {"__type__": type(spec).__qualname__, **stable(attrs)}


def config_identity(hf_config: Any) -> Any:
    """The transformers config as loaded (`to_dict()`), else the object as `stable` sees it."""
    to_dict = getattr(hf_config, "to_dict", None)
    return stable(to_dict() if callable(to_dict) else hf_config)


def answer_identity(
    *, config: JaxLMConfig, loaded: Any, tokenizer: Any, weights: Any, resolved: dict[str, Any]
) -> dict[str, Any]:
    """The parts of a fingerprint (module docstring); `jaxeval.cache.fingerprint_of` hashes them."""
    return {
        "weights": weights,
        "config": config_identity(loaded.hf_config),
        "spec": spec_identity(loaded.spec),
        "tokenizer": tokenizer_identity(tokenizer),
        "args": answer_args(config),
        "resolved": stable(resolved),
    }
