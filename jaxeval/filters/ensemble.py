"""`FILTERS`, the named filter table, and `FilterEnsemble`, a named pipeline of filters.

A filter is a pure function `fn(resps, docs, **kwargs) -> filtered`, where `resps` holds one list of
responses per instance (R instances, each as long as the task's `repeats`) and `docs` the R documents.
An ensemble chains its filters and stores the result per instance under its name:

    gsm8k "strict-match" = [("regex", {"regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}), ("take_first", {})]
    inst.resps = ["... #### 42", "... #### 41"]    ->   inst.filtered_resps["strict-match"] = "42"

Filters hold no state, so each application starts afresh, as lm-eval's fresh filter objects do.
The task YAML form `filter_list: [{name, filter: [{function, **kwargs}, ...]}]` maps onto
`build_filter_ensemble(name, [(function, kwargs), ...])`, which checks names and keywords up front.

A step may also be a filter class from a task's helper module (lm-eval's `Filter` protocol), as
lm-eval's catalogue uses it: `function: !function utils.MultiChoiceRegexFilter` plus keywords. The
class is constructed afresh with the keywords for every application, and `obj.apply(resps, docs)`
returns one value per instance:

    bbh_cot_zeroshot "flexible-extract" = [(utils.MultiChoiceRegexFilter, {"group_select": 0, ...}),
                                           ("take_first", {})]
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jaxeval.errors import JaxevalError
from jaxeval.filters import extraction, multi_choice, selection, transformation
from jaxeval.registry import Registry

if TYPE_CHECKING:  # annotations only: filters sit below the task engine
    from jaxeval.api.instance import Instance

FilterFn = Callable[..., Any]

FILTERS: Registry[FilterFn] = Registry("filter")
for _name, _fn in {
    "take_first": selection.take_first,
    "take_first_k": selection.take_first_k,
    "majority_vote": selection.majority_vote,
    "regex": extraction.regex,
    "regex_pos": extraction.regex_pos,
    "remove_whitespace": extraction.remove_whitespace,
    "multi_choice_regex": multi_choice.multi_choice_regex,
    "lowercase": transformation.lowercase,
    "uppercase": transformation.uppercase,
    "map": transformation.map_values,
    "format_span": transformation.format_span,
    "custom": transformation.custom,
    "decontaminate": transformation.decontaminate,
}.items():
    FILTERS.add(_name, _fn)


def _check_pattern(value: Any) -> str | None:
    try:
        re.compile(value)
    except (re.error, TypeError) as e:
        return f"is not a valid regular expression ({e})"
    return None


def _check_patterns(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        return "must be a list of regular expressions"
    return next((m for m in map(_check_pattern, value) if m), None)


# Checks of keyword values shared by several filters: keyword -> (value -> problem or None).
_VALUE_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "regex_pattern": _check_pattern,
    "regexes_to_ignore": _check_patterns,
    "group_select": lambda v: None if isinstance(v, int) else "must be an integer",
    "k": lambda v: None if isinstance(v, int) and v > 0 else "must be a positive integer",
    "mapping_dict": lambda v: None if v is None or isinstance(v, Mapping) else "must be a mapping",
    "filter_fn": lambda v: None if callable(v) else "must be a function (use !function in YAML)",
}


def _step_name(step: str | Callable) -> str:
    return step if isinstance(step, str) else getattr(step, "__qualname__", repr(step))


def check_filter_class(pipeline: str, cls: Callable, kwargs: Mapping[str, Any]) -> None:
    """A filter class must accept its keywords and give an object with `apply(resps, docs)`."""
    field = f"filter_list[{pipeline}]"
    name = f"{getattr(cls, '__module__', '?')}.{_step_name(cls)}"
    try:
        obj = cls(**kwargs)
    except TypeError as e:
        raise JaxevalError(
            f"filter class {name} does not accept {dict(kwargs)} ({e})", field=field
        ) from None
    if not callable(getattr(obj, "apply", None)):
        raise JaxevalError(
            f"filter {name} has no apply(resps, docs) method",
            field=field,
            hint="a filter class follows lm-eval's Filter protocol",
        )


def check_filter_kwargs(pipeline: str, name: str | Callable, kwargs: Mapping[str, Any]) -> None:
    """Raise `JaxevalError` if `name` is unknown or `kwargs` don't fit its signature and types."""
    if not isinstance(name, str):
        check_filter_class(pipeline, name, kwargs)
        return
    field = f"filter_list[{pipeline}]"
    if name not in FILTERS:
        raise JaxevalError(FILTERS.miss_message(name), field=field)
    params = inspect.signature(FILTERS.get(name)).parameters
    options = {p.name: p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    for key, value in kwargs.items():
        if key not in options:
            known = ", ".join(options) or "none"
            raise JaxevalError(
                f"filter '{name}' has no option '{key}' (its options: {known})", field=field
            )
        problem = _VALUE_CHECKS.get(key, lambda _: None)(value)
        if problem:
            raise JaxevalError(f"filter '{name}': option '{key}' {problem}", field=field)
    missing = [
        k for k, p in options.items() if p.default is inspect.Parameter.empty and k not in kwargs
    ]
    if missing:
        raise JaxevalError(f"filter '{name}' needs the option(s) {', '.join(missing)}", field=field)


@dataclasses.dataclass(frozen=True)
class FilterEnsemble:
    """A named chain of `(filter name, kwargs)` steps applied over all of a task's instances."""

    name: str
    filters: tuple[tuple[str | Callable, Mapping[str, Any]], ...]

    def apply(self, instances: list[Instance]) -> None:
        """Run the chain over `[inst.resps ...]` and set `inst.filtered_resps[self.name]`."""
        if not instances:
            return
        resps: Any = [inst.resps for inst in instances]
        docs = [inst.doc for inst in instances]
        for fname, kwargs in self.filters:
            if isinstance(fname, str):
                resps = list(FILTERS.get(fname)(resps, docs, **kwargs))
            else:  # a filter class: a fresh object per application, as lm-eval does
                resps = list(fname(**kwargs).apply(resps, docs))
        if len(resps) != len(instances):
            raise JaxevalError(
                f"filter pipeline '{self.name}' returned {len(resps)} results for "
                f"{len(instances)} instances",
                hint="a filter must return one value per instance, in order",
            )
        for inst, filtered in zip(instances, resps):
            inst.filtered_resps[self.name] = filtered


def lm_eval_registered_filter(name: str) -> Callable | None:
    """A filter class that a catalogue helper registered in lm-eval's own registry, by name.

    Helpers such as acpbench's `acp_utils.py` run `@register_filter("ACP_grammar_filter")` when
    their YAML's `!function` tags import them; the YAML then names the filter. Only consulted once
    lm-eval is loaded (never imported for our own tasks)."""
    if "lm_eval.api.registry" not in sys.modules:
        return None
    registry = sys.modules["lm_eval.api.registry"]
    try:
        return registry.filter_registry.get(name)
    except (KeyError, AttributeError):
        return None


def build_filter_ensemble(
    name: str, components: Sequence[tuple[str | Callable, Mapping[str, Any] | None]]
) -> FilterEnsemble:
    """Check each `(filter name, kwargs or None)` step and return the pipeline."""
    steps = []
    for fname, kwargs in components:
        kwargs = dict(kwargs or {})
        if isinstance(fname, str) and fname not in FILTERS:
            fname = lm_eval_registered_filter(fname) or fname
        check_filter_kwargs(name, fname, kwargs)
        steps.append((fname, kwargs))
    return FilterEnsemble(name=name, filters=tuple(steps))
