"""lm-eval's `key=value` flags that build a dict: `--wandb_args`, `--wandb_config_args`,
`--hf_hub_log_args`.

    --wandb_args project=evals,name=run-1 tags=['a','b']
    -> {"project": "evals", "name": "run-1", "tags": ["a", "b"]}
    --wandb_args '{"project": "evals", "config": {"lr": 0.1}}'   (a JSON object: taken whole)

Each space-separated word is split on commas outside brackets and quotes; values are typed as
`--model_args` types them (true/false, numbers, Python literals, else the text). A later key
replaces an earlier one, as in lm-eval. A value from a `--config` YAML file may already be a dict.
"""

from __future__ import annotations

import json
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.args import typed_value

_OPEN, _CLOSE = "[({", "])}"


def split_top_level(text: str) -> list[str]:
    """Commas outside brackets and quotes split: "a=1,b=[1,2],c='x,y'" -> ["a=1", "b=[1,2]", "c='x,y'"]."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    quote: str | None = None
    for char in text:
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def merge_dict_args(values: Any, flag: str) -> dict[str, Any]:
    """The dict one of these flags gives: None (flag absent) -> {}; a dict (from a --config file) as
    is; a list of words -> a JSON object if the first word is one, else every `k=v` merged."""
    if values is None:
        return {}
    if isinstance(values, dict):
        return dict(values)
    words = [values] if isinstance(values, str) else list(values)
    if words and words[0].strip().startswith("{"):
        try:
            loaded = json.loads(words[0])
        except json.JSONDecodeError as e:
            raise JaxevalError(
                f"--{flag} is not valid JSON: {e}",
                field=flag,
                hint="give a JSON object, or key=value pairs (project=evals,name=run-1)",
            ) from None
        if isinstance(loaded, dict):
            return loaded
    out: dict[str, Any] = {}
    for word in words:
        for item in split_top_level(word):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise JaxevalError(
                    f"--{flag} entry {item!r} is not key=value",
                    field=flag,
                    hint="write key=value pairs separated by commas or spaces, e.g. "
                    "project=evals,name=run-1",
                )
            out[key.strip()] = _typed(value.strip())
    return out


def _typed(text: str) -> Any:
    """`'a b'` -> "a b" (quotes keep a value text), else as `--model_args` types values."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return typed_value(text)
