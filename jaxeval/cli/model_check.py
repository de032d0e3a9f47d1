"""`--model_args` of jaxeval's own model (`jax`, alias `hf`) checked before tasks or weights load.

    --model_args pretrained=DIR,max_length=abc   -> "max_length='abc' is not an integer"
    --model_args pretrained=DIR,dtype=float8     -> "unknown dtype 'float8'" (the loader's own rule)
    --model_args pretrained=DIR,add_bos_token=2  -> "add_bos_token=2 is not true or false"
    --model_args pretrained=DIR,max_lenght=2048  -> unknown model argument (JaxLMConfig's rule)

Integer and true/false arguments are read from the annotations of `JaxLMConfig`'s and `GenConfig`'s
fields, so a new field is checked without a change here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxeval.errors import JaxevalError

OWN_MODELS = ("jax", "hf")
_INT, _BOOL = ("int", "int | None"), ("bool", "bool | None")


def _field_types() -> dict[str, str]:
    """Model argument name -> its field's annotation, as written (`int | None`, ...)."""
    # start-up: the model's config classes load only when a run checks its arguments
    from jaxeval.lm.generate.config import GenConfig
    from jaxeval.lm.model_config import GEN_ARGS, JaxLMConfig

    own = {f.name: str(f.type) for f in dataclasses.fields(JaxLMConfig)}
    gen = {f.name: str(f.type) for f in dataclasses.fields(GenConfig)}
    return {**own, **{name: gen[field] for name, field in GEN_ARGS.items()}}


def check_model_args(model: Any, model_args: str, *, batch_size: Any, max_batch_size: Any) -> None:
    """Raises a `JaxevalError` naming the first bad argument of jaxeval's model; other models
    (an object, a registered name of a user's own) are left to themselves."""
    if model not in OWN_MODELS:
        return
    # start-up: the typed parser, the config and the loader's dtype rule load with the run
    from jaxeval.lm.args import parse_model_args
    from jaxeval.lm.model_config import JaxLMConfig
    from jaxeval.models.loader import dtype_name

    args = parse_model_args(model_args)
    types = _field_types()
    for key, value in args.items():
        kind = types.get(key)
        if value is None and kind is not None and kind.endswith("| None"):
            continue
        if kind in _INT and (isinstance(value, bool) or not isinstance(value, int)):
            raise JaxevalError(
                f"--model_args {key}={value!r} is not an integer",
                field="model_args",
                hint=f"write {key}=N with N a whole number",
            )
        if kind in _BOOL and not isinstance(value, bool):
            raise JaxevalError(
                f"--model_args {key}={value!r} is not true or false",
                field="model_args",
                hint=f"write {key}=True or {key}=False",
            )
    if (args.get("max_length") or 0) < 0:
        raise JaxevalError(
            f"--model_args max_length={args['max_length']} is negative",
            field="model_args",
            hint="give a positive context length, or leave max_length out for the model's own",
        )
    if "dtype" in args:
        try:
            dtype_name(str(args["dtype"]), {}, what="dtype")
        except JaxevalError as e:
            raise e.located(field="model_args") from None
    extra = {"batch_size": batch_size, "max_batch_size": max_batch_size}
    JaxLMConfig.from_kwargs({**args, **{k: v for k, v in extra.items() if v is not None}})
