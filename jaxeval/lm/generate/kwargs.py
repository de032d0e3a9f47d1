"""A request's `gen_kwargs` -> validated `GenSettings`, with lm-eval 0.4.13's rules (HF backend).

The rules, and the lm-eval code they mirror:

* `normalize_gen_kwargs` (`models/utils.py`): `until` becomes a list (a lone string is wrapped);
  the token budget is the first of `max_gen_toks` > `max_new_tokens` > `max_tokens` >
  `max_completion_tokens`, else the default 256; `do_sample=None` means `temperature > 0`;
  `do_sample=False` forces `temperature = 0`.
* `handle_stop_sequences`: the EOS string (`decode(eot_token_id, skip_special_tokens=False)`) is
  appended to `until` unless already there.
* HF `generate` defaults when sampling: `top_k` and `top_p` come from the model's
  `generation_config` when it sets them, else transformers' 50 and 1.0 (warpers applied in the
  order temperature, top-k, top-p).

    normalize({"until": "\\n\\n", "max_new_tokens": 32}, eos="</s>")
    -> GenSettings(until=("\\n\\n", "</s>"), max_gen_toks=32, do_sample=False, temperature=0.0, ...)
    normalize({"do_sample": True, "temperature": 0.7, "top_p": 0.9}, eos="</s>")
    -> GenSettings(until=("</s>",), max_gen_toks=256, do_sample=True, temperature=0.7, top_k=50, top_p=0.9)

Anything lm-eval + transformers would reject or silently treat differently is a `JaxevalError`
naming the key: unknown keys, `do_sample=True` with temperature 0 (transformers raises), a
`max_length` (its meaning depends on the padded batch in lm-eval), beams, penalties.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from jaxeval.errors import JaxevalError

DEFAULT_MAX_GEN_TOKS = 256
HF_DEFAULT_TOP_K = 50
HF_DEFAULT_TOP_P = 1.0
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# Keys accepted only at the value that changes nothing.
_NEUTRAL = {"num_beams": 1, "num_return_sequences": 1, "repetition_penalty": 1.0}
_IGNORED = ("use_cache",)
SUPPORTED_KEYS = (
    ("until", "do_sample", "temperature", "top_k", "top_p")
    + MAX_TOKEN_ALIASES
    + tuple(_NEUTRAL)
    + _IGNORED
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenSettings:
    """Normalized generation settings of one request."""

    until: tuple[str, ...]  # stop strings, EOS string included
    max_gen_toks: int
    do_sample: bool
    temperature: float  # 0.0 when greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self):
        if self.max_gen_toks < 1:
            raise JaxevalError(
                f"max_gen_toks must be >= 1, got {self.max_gen_toks}", field="max_gen_toks"
            )
        if self.do_sample and not self.temperature > 0:
            raise JaxevalError(
                f"do_sample=True needs temperature > 0, got {self.temperature}",
                field="temperature",
                hint="set temperature > 0, or do_sample=False for greedy decoding",
            )
        if self.top_k < 0:
            raise JaxevalError(f"top_k must be >= 0, got {self.top_k}", field="top_k")
        if not 0.0 < self.top_p <= 1.0:
            raise JaxevalError(f"top_p must be in (0, 1], got {self.top_p}", field="top_p")

    @property
    def greedy(self) -> bool:
        return not self.do_sample


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingDefaults:
    """What a model's `generation_config` contributes when a request samples."""

    top_k: int = HF_DEFAULT_TOP_K
    top_p: float = HF_DEFAULT_TOP_P

    @classmethod
    def from_generation_config(cls, gen_config: Any) -> SamplingDefaults:
        top_k = getattr(gen_config, "top_k", None)
        top_p = getattr(gen_config, "top_p", None)
        return cls(
            top_k=HF_DEFAULT_TOP_K if top_k is None else int(top_k),
            top_p=HF_DEFAULT_TOP_P if top_p is None else float(top_p),
        )


def _number(kwargs: Mapping[str, Any], key: str, kind: type) -> Any:
    value = kwargs[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JaxevalError(f"gen_kwargs {key}={value!r} is not a number", field=key)
    try:
        out = kind(value) if kind is float else int(value)
    except (TypeError, ValueError):
        raise JaxevalError(f"gen_kwargs {key}={value!r} is not a number", field=key) from None
    if kind is float and not math.isfinite(out):
        raise JaxevalError(f"gen_kwargs {key}={value!r} is not finite", field=key)
    return out


def _until(kwargs: Mapping[str, Any]) -> list[str]:
    until = kwargs.get("until", [])
    if not isinstance(until, list):
        until = [until]
    for stop in until:
        if not isinstance(stop, str):
            raise JaxevalError(f"stop sequence {stop!r} in 'until' is not a string", field="until")
    return list(until)


def normalize(
    gen_kwargs: Mapping[str, Any] | None,
    *,
    eos: str | None,
    default_max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
    sampling_defaults: SamplingDefaults = SamplingDefaults(),
) -> GenSettings:
    """One request's gen_kwargs -> GenSettings (rules in the module docstring)."""
    kwargs = dict(gen_kwargs or {})
    if "max_length" in kwargs:
        raise JaxevalError(
            "gen_kwargs 'max_length' is not supported (in lm-eval it counts the padded batch's "
            "prompt length, so results would depend on batching)",
            field="max_length",
            hint="use max_gen_toks",
        )
    unknown = sorted(set(kwargs) - set(SUPPORTED_KEYS))
    if unknown:
        raise JaxevalError(
            f"unsupported gen_kwargs key(s) {', '.join(map(repr, unknown))}",
            field=unknown[0],
            hint=f"supported: {', '.join(SUPPORTED_KEYS)}",
        )
    for key, neutral in _NEUTRAL.items():
        if key in kwargs and _number(kwargs, key, type(neutral)) != neutral:
            raise JaxevalError(
                f"gen_kwargs {key}={kwargs[key]!r} is not supported (only {neutral})", field=key
            )

    until = _until(kwargs)
    max_gen_toks = default_max_gen_toks
    for alias in MAX_TOKEN_ALIASES:
        if kwargs.get(alias) is not None:
            max_gen_toks = _number(kwargs, alias, int)
            break
    temperature = _number(kwargs, "temperature", float) if "temperature" in kwargs else 0.0
    do_sample = kwargs.get("do_sample")
    if do_sample is None:
        do_sample = temperature > 0.0
    elif not isinstance(do_sample, bool):
        raise JaxevalError(f"do_sample={do_sample!r} is not a boolean", field="do_sample")
    if not do_sample:
        temperature = 0.0
    if eos is not None and eos not in until:
        until.append(eos)

    top_k, top_p = 0, 1.0
    if do_sample:
        top_k = (
            _number(kwargs, "top_k", int)
            if kwargs.get("top_k") is not None
            else sampling_defaults.top_k
        )
        top_p = (
            _number(kwargs, "top_p", float)
            if kwargs.get("top_p") is not None
            else sampling_defaults.top_p
        )
    return GenSettings(
        until=tuple(until),
        max_gen_toks=max_gen_toks,
        do_sample=bool(do_sample),
        temperature=float(temperature),
        top_k=top_k,
        top_p=top_p,
    )
