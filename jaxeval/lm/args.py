"""`--model_args` parsing with lm-eval's value typing.

    parse_model_args("pretrained=/m,dtype=float32,batch_size=8,add_bos_token=true")
    -> {"pretrained": "/m", "dtype": "float32", "batch_size": 8, "add_bos_token": True}

A JSON object string is accepted too (`'{"pretrained": "/m"}'`).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from jaxeval.errors import JaxevalError


def typed_value(text: str) -> Any:
    """lm-eval's `handle_cli_value_string`: true/false, int, float, Python literal, else the string."""
    low = text.strip().lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, (list, tuple, dict)) else text


def parse_model_args(arg_string: str | dict | None, flag: str = "model_args") -> dict[str, Any]:
    """`k=v,...` or a JSON object -> typed dict; errors name `--{flag}` (model_args, gen_kwargs)."""
    if not arg_string:
        return {}
    if isinstance(arg_string, dict):
        return dict(arg_string)
    text = arg_string.strip()
    if text.startswith("{"):
        try:
            return dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise JaxevalError(f"--{flag} is not valid JSON: {e}", field=flag) from None
    out: dict[str, Any] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise JaxevalError(
                f"--{flag} entry {part!r} has no '='",
                field=flag,
                hint="write key=value pairs separated by commas, e.g. "
                + (
                    "temperature=0,max_gen_toks=64"
                    if flag == "gen_kwargs"
                    else "pretrained=DIR,dtype=float32"
                ),
            )
        key, value = part.split("=", 1)
        out[key.strip()] = typed_value(value.strip())
    return out
