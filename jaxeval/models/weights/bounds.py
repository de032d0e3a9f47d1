"""What a model's files may declare: sizes checked before anything is built from them.

A config.json or a GGUF header is a few bytes that say how large the model is, and everything built
from it grows with what it says: per-layer rope tables, GGUF's tensor name map (one entry per block
and tensor kind), transformers' per-layer lists, shapes to allocate. So every size is checked first,
in two steps, each failing with a `JaxevalError` naming the file, the field, the value and what was
found:

1. **Caps** (`CAPS`): each count against a bound well above every released model. This is all a
   config alone (`jaxeval plan`) can be held to. `read_config_json` and `check_config_dict` apply
   them to the raw dict (nested configs such as `text_config` included) before transformers builds
   a config object; `check_config` applies them to a config object.
2. **What is on disk** (`on_disk`, `check_counts`): the layers, experts, vocabulary and width the
   config declares must be present among the tensors (safetensors headers, GGUF tensor infos),
   read from their names and shapes only, before the model is built:

       config: num_hidden_layers 2147483648  |  tensors: model.layers.0.*, model.layers.1.*
       -> file m/config.json, field 'num_hidden_layers': 2147483648 layers declared, but the
          weights hold tensors for 2 layers (indices 0 to 1)

The loader then compares every parameter's declared shape with its tensor's size (heads, head
width, MLP width) before reading any weight (`jaxeval.models.loader`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jaxeval.errors import JaxevalError


@dataclasses.dataclass(frozen=True)
class Cap:
    """One kind of count: its name in messages, the largest value accepted, the smallest."""

    what: str
    most: int
    least: int = 1


# Each cap is well above every released model (largest known in brackets), so only a corrupt or
# crafted file reaches one: layers 1024 (126, Llama-3.1-405B), attention heads 1024 (128),
# experts 4096 (512, Qwen3-Next), vocabulary 2**22 = 4,194,304 (262,144, Gemma-3), widths 2**17 =
# 131,072 (hidden 18,432 and MLP 73,728, Nemotron-4-340B), head width 2**12 = 4096 (256, Gemma),
# positions 2**24 = 16,777,216 (10,485,760, Llama-4-Scout). With every cap at once, the per-layer
# tables built from a config stay a few hundred MB.
_LAYERS = Cap("layers", 1024)
_HEADS = Cap("attention heads", 1024)
_EXPERTS = Cap("experts", 4096, least=0)
_VOCAB = Cap("vocabulary entries", 2**22)
_WIDTH = Cap("width", 2**17)
_INNER = Cap("width", 2**17, least=0)
_HEAD_DIM = Cap("head width", 2**12)
_HEAD_PART = Cap("head width", 2**12, least=0)
_POSITIONS = Cap("positions", 2**24)
_WINDOW = Cap("positions", 2**24, least=0)

# Config field (either spelling transformers accepts) -> its cap.
CAPS: dict[str, Cap] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "n_layers", "num_layers"), _LAYERS),
    "sliding_window_pattern": _LAYERS,
    "_sliding_window_pattern": _LAYERS,
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "num_key_value_heads",
            "num_kv_heads",
            "n_head_kv",
            "multi_query_group_num",
        ),
        _HEADS,
    ),
    **dict.fromkeys(
        (
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "n_group",
            "topk_group",
        ),
        _EXPERTS,
    ),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), _VOCAB),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), _WIDTH),
    **dict.fromkeys(
        (
            "intermediate_size",
            "n_inner",
            "ffn_hidden_size",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "kv_lora_rank",
            "q_lora_rank",
        ),
        _INNER,
    ),
    "head_dim": _HEAD_DIM,
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), _HEAD_PART),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "n_ctx", "original_max_position_embeddings"),
        _POSITIONS,
    ),
    "sliding_window": _WINDOW,
}
# Fractions of the head width that are rotated: more than all of it would size the rope tables.
FRACTIONS = ("partial_rotary_factor", "rotary_pct")
_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HEAD_COUNT = ("num_attention_heads", "n_head")
_HINT = (
    "the file is corrupt or was not written for a released model: download it again, or fix the "
    "value"
)


def read_config_json(directory: str) -> dict[str, Any]:
    """`directory/config.json` as a dict, its sizes within `CAPS`; a corrupt file is a named error."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise JaxevalError(
            "missing config.json", file=directory, hint="the model directory needs its config.json"
        )
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise JaxevalError(
            f"config.json is not valid JSON ({e})",
            file=path,
            hint="the file is truncated or corrupt: download the model's config.json again",
        ) from None
    if not isinstance(raw, dict):
        raise JaxevalError(
            f"config.json holds a JSON {type(raw).__name__}, not an object of settings",
            file=path,
            hint="download the model's config.json again",
        )
    check_config_dict(raw, file=path)
    return raw


def _count(value: Any) -> int | None:
    """`value` as a whole number, or None when it is not one (bools, strings, 2.5, inf)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _check_value(value: Any, cap: Cap, *, file: str, shown: str) -> None:
    values = value if isinstance(value, list) else [value]  # per-layer lists: each entry
    for v in values:
        n = _count(v)
        if n is None:
            raise JaxevalError(
                f"{v!r} is not a whole number of {cap.what}",
                file=file,
                field=shown,
                hint=_HINT,
            )
        if not cap.least <= n <= cap.most:
            bound = f"at least {cap.least}" if n < cap.least else f"at most {cap.most:,}"
            raise JaxevalError(
                f"{n:,} {cap.what} is outside what any model has ({bound})",
                file=file,
                field=shown,
                hint=_HINT,
            )


def check_config_dict(
    config: Mapping[str, Any],
    *,
    file: str,
    shown: Callable[[str], str] | None = None,
    _prefix: str = "",
    _depth: int = 0,
) -> None:
    """Raises where a size in `config` (or a nested config) is outside `CAPS`, not a whole number,
    or a rotary fraction outside [0, 1]; `shown(key)` is the field's name in the message."""
    name_of = shown or (lambda key: key)
    for key, value in config.items():
        if not isinstance(key, str):
            continue
        label = name_of(_prefix + key)
        if isinstance(value, dict) and _depth < 3:
            check_config_dict(
                value, file=file, shown=shown, _prefix=f"{_prefix}{key}.", _depth=_depth + 1
            )
        elif value is not None and key in CAPS:
            _check_value(value, CAPS[key], file=file, shown=label)
        elif value is not None and key in FRACTIONS:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise JaxevalError(
                    f"{value!r} is not a fraction of the head width between 0 and 1",
                    file=file,
                    field=label,
                    hint=_HINT,
                )
    if config.get("head_dim") is None:  # the head width then is the width over the head count
        hidden = next((_count(config[k]) for k in _HIDDEN if _count(config.get(k))), None)
        heads = next((_count(config[k]) for k in _HEAD_COUNT if _count(config.get(k))), None)
        if hidden and heads and hidden // heads > _HEAD_DIM.most:
            raise JaxevalError(
                f"a width of {hidden:,} over {heads} attention heads makes heads "
                f"{hidden // heads:,} wide, more than any model has (at most {_HEAD_DIM.most:,})",
                file=file,
                field=name_of(_prefix + "num_attention_heads"),
                hint=_HINT,
            )


def config_values(cfg: Any) -> dict[str, Any]:
    """A transformers config (or any object, or a dict) as a plain dict of its fields."""
    if isinstance(cfg, Mapping):
        return dict(cfg)
    to_dict = getattr(cfg, "to_dict", None)
    values = to_dict() if callable(to_dict) else dict(vars(cfg))
    for key in CAPS:  # attribute-map spellings (GPT-2's n_layer read as num_hidden_layers)
        if key not in values and isinstance(getattr(type(cfg), "attribute_map", None), dict):
            if key in type(cfg).attribute_map:
                values[key] = getattr(cfg, key, None)
    return values


def check_config(cfg: Any, *, file: str | None = None) -> None:
    """`check_config_dict` on a config object (transformers' or any with the same fields)."""
    where = file or getattr(cfg, "name_or_path", "") or getattr(cfg, "model_type", "the config")
    check_config_dict(config_values(cfg), file=str(where))


# --------------------------------------------------------------------------- what is on disk
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|blk)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_FUSED_EXPERTS = re.compile(r"\.experts\.[A-Za-z_]|_exps\.")  # [X, ...] over all experts
_EMBEDDINGS = (
    "embed_tokens.weight",
    "wte.weight",
    "word_embeddings.weight",
    "embed_in.weight",
    "token_embd.weight",
)


@dataclasses.dataclass(frozen=True)
class OnDisk:
    """The counts the tensors of a checkpoint show: distinct layer indices, the most experts of
    one tensor (or distinct expert indices), the embedding's rows and width (None: no embedding)."""

    layers: int
    first_layer: int | None
    last_layer: int | None
    experts: int
    vocab: int | None
    width: int | None


def on_disk(names: Iterable[str], shape: Callable[[str], tuple[int, ...]]) -> OnDisk:
    """The counts from tensor names and shapes alone (no tensor data is read)."""
    layers: set[int] = set()
    experts: set[int] = set()
    stacked, vocab, width = 0, None, None
    for name in names:
        m = _LAYER.search(name)
        if m:
            layers.add(int(m.group(1)))
        e = _EXPERT.search(name)
        if e:
            experts.add(int(e.group(1)))
        elif _FUSED_EXPERTS.search(name):
            dims = shape(name)
            if len(dims) >= 2:
                stacked = max(stacked, dims[0])
        if name.endswith(_EMBEDDINGS):
            dims = shape(name)
            if len(dims) == 2 and (vocab is None or dims[0] > vocab):
                vocab, width = dims
    return OnDisk(
        layers=len(layers),
        first_layer=min(layers, default=None),
        last_layer=max(layers, default=None),
        experts=max(stacked, len(experts)),
        vocab=vocab,
        width=width,
    )


def check_counts(
    declared: Mapping[str, tuple[str, Any]],
    found: OnDisk,
    *,
    file: str,
    weights: str,
    hint: str,
) -> None:
    """Raises where a declared count exceeds what the tensors hold (where they show that count).

    `declared` maps "layers", "experts", "vocab", "width" to (field name in messages, value); a
    value of None (or a kind left out) is not checked. `weights` names the tensors ("the file's
    tensors"), `hint` says what to do.
    """
    have = {
        "layers": found.layers,
        "experts": found.experts,
        "vocab": found.vocab,
        "width": found.width,
    }
    for kind in ("layers", "experts", "vocab", "width"):
        field, value = declared.get(kind, ("", None))
        n = _count(value)
        # none found: the names follow another layout, which the loader's own checks then hold
        # to the config (every tensor the family needs is looked up before any is read)
        if n is None or n <= 0 or not have[kind] or n <= have[kind]:
            continue
        if kind == "layers":
            seen = f"cover {found.layers} (indices {found.first_layer} to {found.last_layer})"
        elif kind == "experts":
            seen = f"cover {found.experts}"
        else:
            seen = f"hold an embedding of {found.vocab:,} rows of width {found.width:,}"
        said = {
            "layers": f"{n:,} layers",
            "experts": f"{n:,} experts",
            "vocab": f"a vocabulary of {n:,}",
            "width": f"a hidden width of {n:,}",
        }[kind]
        raise JaxevalError(
            f"{said} declared, but {weights} {seen}", file=file, field=field, hint=hint
        )
