"""Reading a Hugging Face config: field readers, rope parameters, which layers slide, shared fields.

Configs are read through attributes, so both transformers 5 objects (RoPE under `rope_parameters`,
possibly nested per layer type) and older ones (`rope_theta`, `rope_scaling`, `rotary_pct`,
`rotary_emb_base`, `rope_local_base_freq`, `sliding_window_pattern`) work.

A family row (`table.py`) names config fields as data: `Field("use_qk_norm", False)` reads
`getattr(cfg, "use_qk_norm", False)`; `When(Field("use_qk_norm", False), "per_head")` is "per_head"
where that field is truthy, else None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.models.rope import DynamicRope, LayerRope, layer_rope

_REQUIRED = object()


def config_value(cfg: Any, *names: str, default: Any = None) -> Any:
    """The first of `names` the config sets to something other than None, else `default`."""
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return default


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field: `getattr(cfg, name, default)`; without a default the field must exist."""

    name: str
    default: Any = _REQUIRED

    def read(self, cfg: Any) -> Any:
        if self.default is _REQUIRED:
            return getattr(cfg, self.name)
        return getattr(cfg, self.name, self.default)


@dataclasses.dataclass(frozen=True)
class When:
    """`then` where the config field `flag` is truthy, else `otherwise`."""

    flag: Field
    then: Any
    otherwise: Any = None

    def read(self, cfg: Any) -> Any:
        return self.then if self.flag.read(cfg) else self.otherwise


def option_value(value: Any, cfg: Any) -> Any:
    """A row's option as this config has it: a `Field` or `When` is read, a constant stays."""
    return value.read(cfg) if isinstance(value, (Field, When)) else value


def check_rules(rules: dict[str, tuple[str | None, dict[str, Any]]]) -> None:
    """Raises ValueError naming each option whose rule name (None: no rule) is not in its table.

    check_rules({"sliding": ("evn", SLIDING_RULES)})
        -> ValueError: sliding 'evn' not in ('none', 'all', 'even', 'pattern', ...)
    """
    problems = [
        f"{option} {name!r} not in {tuple(table)}"
        for option, (name, table) in rules.items()
        if name is not None and name not in table
    ]
    if problems:
        raise ValueError("; ".join(problems))


def text_config(cfg: Any) -> Any:
    """The text decoder's config inside an image-text config (`text_config`)."""
    text = getattr(cfg, "text_config", None)
    if text is None:
        raise JaxevalError(f"{cfg.model_type} config has no text_config")
    return text


def rope_parameters(cfg: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The standardised rope dict (`rope_type`, `rope_theta`, ...) for one layer type.

    transformers 5: `config.rope_parameters`, flat or nested by layer type. Older configs: the classic
    `rope_theta` / `rotary_emb_base` plus `rope_scaling`; Gemma-3's local layers use
    `rope_local_base_freq` and no scaling.
    """
    nested = getattr(cfg, "rope_parameters", None)
    if isinstance(nested, dict) and nested:
        if layer_type is not None and isinstance(nested.get(layer_type), dict):
            params = dict(nested[layer_type])
        elif any(isinstance(v, dict) for v in nested.values()):
            params = dict(next(v for v in nested.values() if isinstance(v, dict)))
        else:
            params = dict(nested)
    else:
        params = dict(getattr(cfg, "rope_scaling", None) or {})
        if layer_type == "sliding_attention" and getattr(cfg, "rope_local_base_freq", None):
            params = {"rope_theta": cfg.rope_local_base_freq}
    params.setdefault("rope_type", params.get("type", "default"))
    theta = config_value(cfg, "rope_theta", "rotary_emb_base", default=10000.0)
    params.setdefault("rope_theta", theta)
    if params["rope_type"] in ("su", "yarn") and getattr(cfg, "model_type", None) == "phi3":
        params["rope_type"] = "longrope"  # Phi-3's legacy names, as transformers maps them
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        original = config_value(
            cfg, "original_max_position_embeddings", default=cfg.max_position_embeddings
        )
        params.setdefault("original_max_position_embeddings", original)
    return params


def rotary_dim(cfg: Any, head_dim: int, legacy_field: str | None) -> int:
    """E': the rotated features per head. With `legacy_field` (Phi-3 `partial_rotary_factor`,
    GPT-NeoX `rotary_pct`) a fraction of E, from the rope parameters or else that field; without
    it all E (those families ignore a `partial_rotary_factor`)."""
    if legacy_field is None:
        return head_dim
    legacy = config_value(cfg, legacy_field, default=1.0)
    return int(head_dim * rope_parameters(cfg).get("partial_rotary_factor", legacy))


def rope_tables(
    cfg: Any, layer_types: list[str | None], dim: int
) -> tuple[tuple[LayerRope, ...], DynamicRope | None]:
    """The rotary table of each layer (over `dim` features), or one dynamic-NTK rope for all."""
    tables = [
        layer_rope(
            rope_parameters(cfg, t), dim=dim, max_position_embeddings=cfg.max_position_embeddings
        )
        for t in layer_types
    ]
    dynamic = [t for t in tables if isinstance(t, DynamicRope)]
    if dynamic:
        if len(set(tables)) != 1:
            raise JaxevalError(
                "dynamic rope mixed with other rope types across layers is not supported"
            )
        return (), dynamic[0]
    return tuple(tables), None


def _pattern(cfg: Any, n: int) -> list[bool]:
    every = config_value(cfg, "sliding_window_pattern", "_sliding_window_pattern", default=6)
    return [bool((i + 1) % every) for i in range(n)]


def _after_max_window_layers(cfg: Any, n: int) -> list[bool]:
    if not getattr(cfg, "use_sliding_window", False):
        return [False] * n
    first = config_value(cfg, "max_window_layers", default=n)
    return [i >= first for i in range(n)]


# How a config without `layer_types` but with a `sliding_window` says which of its n layers slide
# (True) or attend globally (False), by the rule name a family's row gives.
SLIDING_RULES: dict[str, Callable[[Any, int], list[bool]]] = {
    "none": lambda cfg, n: [False] * n,  # the window is ignored
    "all": lambda cfg, n: [True] * n,  # Mistral, Phi-3, Starcoder2, Mixtral, Qwen3-MoE
    "even": lambda cfg, n: [i % 2 == 0 for i in range(n)],  # Gemma-2: 0, 2, 4, ... slide
    "pattern": _pattern,  # Gemma-3: all but every `sliding_window_pattern`-th layer slide
    "after_max_window_layers": _after_max_window_layers,  # Qwen2/3: with use_sliding_window
}


def layer_types(cfg: Any, sliding: str) -> list[str]:
    """'sliding_attention' or 'full_attention' per layer: the config's `layer_types`, or where it has
    none but a `sliding_window`, the layers `SLIDING_RULES[sliding]` says slide."""
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if types:
        return list(types)[:n]
    if not getattr(cfg, "sliding_window", None):
        return ["full_attention"] * n
    slides = SLIDING_RULES[sliding](cfg, n)
    return ["sliding_attention" if s else "full_attention" for s in slides]


def windows(cfg: Any, types: list[str]) -> tuple[int, ...]:
    """W per layer: the config's `sliding_window` on sliding layers, 0 (global) on the others."""
    window = getattr(cfg, "sliding_window", None) or 0
    return tuple(int(window) if t == "sliding_attention" else 0 for t in types)


def common_fields(cfg: Any, compute_dtype: str) -> dict[str, Any]:
    """The `ModelSpec` fields every Llama-style config names alike (V, D, L, H, G, E)."""
    heads = cfg.num_attention_heads
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_hidden_layers,
        "num_heads": heads,
        "num_kv_heads": config_value(cfg, "num_key_value_heads", default=heads),
        "head_dim": config_value(cfg, "head_dim", default=cfg.hidden_size // heads),
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "compute_dtype": compute_dtype,
    }
