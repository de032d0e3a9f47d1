"""A run's arguments, lm-eval 0.4.13's `simple_evaluate` parameters, as one frozen object.

`RunConfig`'s fields are the one list of them: `simple_evaluate`'s signature is made from the
fields (`RunConfig.signature`), the `jaxeval run` command fills them from its options of the same
names (`RunConfig.from_cli`), and the evaluator reads them from the object. An option added to
lm-eval's `run` therefore reaches the evaluator by one field added here, in lm-eval's order:

    simple_evaluate("jax", "pretrained=DIR", ["arc_easy"], limit=10)
        -> RunConfig.from_call(("jax", "pretrained=DIR", ["arc_easy"]), {"limit": 10})
        -> RunConfig(model="jax", model_args="pretrained=DIR", tasks=["arc_easy"], limit=10, ...)
    jaxeval run --model jax --tasks arc_easy --limit 10 --seed 3
        -> RunConfig.from_cli(args, random_seed=3, numpy_random_seed=3, ...)  (args.limit, ...)
    RunConfig.from_call((), {"model": "jax", "tasks": ["t"], "limt": 10})
        -> JaxevalError: field 'limt': unknown argument of simple_evaluate
             What to do: did you mean 'limit'?
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jaxeval.errors import JaxevalError

if TYPE_CHECKING:
    import argparse

    from jaxeval.api.task_manager import TaskManager


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """`simple_evaluate`'s parameters in lm-eval's order, with lm-eval's defaults (positional
    callers depend on the order)."""

    model: Any
    model_args: str | dict | None = None
    tasks: list[Any] | None = None
    num_fewshot: int | None = None
    batch_size: int | str | None = None
    max_batch_size: int | None = None
    device: str | None = None
    use_cache: str | None = None
    cache_requests: bool = False
    rewrite_requests_cache: bool = False
    delete_requests_cache: bool = False
    limit: int | float | None = None
    samples: dict[str, list[int]] | None = None
    bootstrap_iters: int = 100000
    check_integrity: bool = False
    write_out: bool = False
    log_samples: bool = True
    evaluation_tracker: Any = None
    system_instruction: str | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool = True
    gen_kwargs: str | dict | None = None
    task_manager: TaskManager | None = None
    verbosity: str | None = None
    predict_only: bool = False
    random_seed: int | None = 0
    numpy_random_seed: int | None = 1234
    torch_random_seed: int | None = 1234
    fewshot_random_seed: int | None = 1234
    confirm_run_unsafe_code: bool = False
    metadata: dict | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and self.samples is not None:
            raise JaxevalError("--limit and --samples cannot be used together", field="limit")
        if not self.tasks:
            raise JaxevalError("no tasks given", field="tasks", hint="pass --tasks NAME[,NAME...]")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The fields' names, in lm-eval's parameter order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def signature(cls, returns: Any = inspect.Signature.empty) -> inspect.Signature:
        """The fields as a function's parameters, positional or keyword: `simple_evaluate`'s."""
        empty = inspect.Parameter.empty
        parameters = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=empty if f.default is dataclasses.MISSING else f.default,
                annotation=f.type,
            )
            for f in dataclasses.fields(cls)
        ]
        return inspect.Signature(parameters, return_annotation=returns)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunConfig:
        """The config of `values` (field name -> value); an unknown name is a `JaxevalError` that
        suggests the nearest field."""
        _known(values, cls.names())
        return cls(**values)

    @classmethod
    def from_call(cls, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> RunConfig:
        """The config of a `simple_evaluate(*args, **kwargs)` call. An unknown keyword is a
        `JaxevalError` (`from_dict`); too many positional arguments, one given twice or no `model`
        is Python's own `TypeError`."""
        _known(kwargs, cls.names())
        bound = cls.signature().bind(*args, **kwargs)
        return cls(**bound.arguments)

    @classmethod
    def from_cli(cls, args: argparse.Namespace | Mapping[str, Any], /, **derived: Any) -> RunConfig:
        """The config of a `jaxeval run` command line, as lm-eval's `EvaluatorConfig.from_cli`: each
        option whose name is a field gives its value, then `derived` (values the command computes
        from its options: `--seed`'s four seeds, `--model_args` as text, ...) go over them. The
        command's other options (`--output_path`, `--show_config`, ...) are not run arguments."""
        given = args if isinstance(args, Mapping) else vars(args)
        names = cls.names()
        return cls.from_dict({**{k: v for k, v in given.items() if k in names}, **derived})


def _known(keys: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """Raises for the first key that is not a run argument, suggesting the nearest."""
    for key in keys:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"the arguments: {', '.join(names)}"
            raise JaxevalError("unknown argument of simple_evaluate", field=str(key), hint=hint)
