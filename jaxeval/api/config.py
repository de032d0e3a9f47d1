"""Frozen task, few-shot and group configurations, parsed from YAML dicts at the edge.

Every `TaskConfig` field lm-eval has exists here with the same default and meaning. An unknown key is
an error that names the file and the key (lm-eval silently ignores some; we do not):

    TaskConfig.from_dict({"task": "t", "doc_to_txt": "q"}, source="t.yaml")
    -> JaxevalError: task 't', file t.yaml, field 'doc_to_txt': unknown key. Did you mean 'doc_to_text'?
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable
from typing import Any

from jaxeval.api.instance import OUTPUT_TYPES
from jaxeval.errors import JaxevalError

DEFAULT_MAX_GEN_TOKS = 256

# Keys that only structure YAML files; consumed by the loader and never part of a TaskConfig.
STRUCTURAL_KEYS = ("include", "group", "task_list", "class")


def default_gen_kwargs(until: str | list[str] | None) -> dict[str, Any]:
    """lm-eval's defaults for a generation task without `generation_kwargs`: greedy, 256 tokens."""
    out: dict[str, Any] = {
        "temperature": 0.0,
        "do_sample": False,
        "max_gen_toks": DEFAULT_MAX_GEN_TOKS,
    }
    out["until"] = [] if until is None else ([until] if isinstance(until, str) else list(until))
    return out


def _unknown_keys(cls: type, raw: dict, *, task: str | None, source: str | None) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in names:
            close = difflib.get_close_matches(str(key), sorted(names), n=1, cutoff=0.6)
            hint = (
                f"did you mean '{close[0]}'?"
                if close
                else f"valid keys: {', '.join(sorted(names))}"
            )
            raise JaxevalError("unknown key", task=task, file=source, field=str(key), hint=hint)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FewshotConfig:
    """How few-shot examples are drawn and formatted; unset fields inherit the task's values."""

    sampler: str = "default"
    split: str | None = None
    process_docs: Callable | None = None
    fewshot_indices: list[int] | None = None
    samples: list[dict] | Callable | None = None
    doc_to_text: Any = None
    doc_to_choice: Any = None
    doc_to_target: Any = None
    gen_prefix: str | None = None
    fewshot_delimiter: str | None = None
    target_delimiter: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """One task, as lm-eval's `TaskConfig` (lm_eval/config/task.py), frozen."""

    task: str | None = None
    task_alias: str | None = None
    tag: str | list | None = None
    custom_dataset: Callable | None = None
    dataset_path: str | None = None
    dataset_name: str | None = None
    dataset_kwargs: dict | None = None
    training_split: str | None = None
    validation_split: str | None = None
    test_split: str | None = None
    fewshot_split: str | None = None
    process_docs: Callable | None = None
    doc_to_text: Any = None
    doc_to_target: Any = None
    doc_to_image: Any = None
    doc_to_audio: Any = None
    unsafe_code: bool = False
    doc_to_choice: Any = None
    process_results: Callable | str | None = None
    use_prompt: str | None = None
    description: str = ""
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    fewshot_config: dict | FewshotConfig | None = None
    num_fewshot: int | None = None
    metric_list: list | None = None
    output_type: str = "generate_until"
    generation_kwargs: dict | None = None
    repeats: int = 1
    filter_list: str | list | None = None
    should_decontaminate: bool = False
    doc_to_decontamination_query: str | None = None
    gen_prefix: str | None = None
    metadata: dict | None = None

    def __post_init__(self) -> None:
        task, src = self.task, (self.metadata or {}).get("config_source")
        if self.output_type not in OUTPUT_TYPES:
            raise JaxevalError(
                f"output_type '{self.output_type}' is not one of {', '.join(OUTPUT_TYPES)}",
                task=task,
                file=src,
                field="output_type",
            )
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise JaxevalError(
                "repeats must be a positive integer", task=task, file=src, field="repeats"
            )
        if self.num_fewshot is not None and (
            not isinstance(self.num_fewshot, int) or self.num_fewshot < 0
        ):
            raise JaxevalError(
                "num_fewshot must be a non-negative integer",
                task=task,
                file=src,
                field="num_fewshot",
            )
        gen = self.generation_kwargs
        if gen is not None:
            if not isinstance(gen, dict):
                raise JaxevalError(
                    "generation_kwargs must be a mapping",
                    task=task,
                    file=src,
                    field="generation_kwargs",
                )
            gen = dict(gen)
            if "temperature" in gen:
                try:
                    gen["temperature"] = float(gen["temperature"])
                except (TypeError, ValueError):
                    raise JaxevalError(
                        f"generation_kwargs temperature={gen['temperature']!r} is not a number",
                        task=task,
                        file=src,
                        field="generation_kwargs.temperature",
                        hint="give a number such as 0 or 0.7 (in the YAML or in --gen_kwargs)",
                    ) from None
            if "until" not in gen:
                gen["until"] = [self.fewshot_delimiter]
        elif self.output_type == "generate_until":
            gen = default_gen_kwargs(self.fewshot_delimiter)
        object.__setattr__(self, "generation_kwargs", gen)
        if self.metric_list is not None:
            if not isinstance(self.metric_list, list) or not all(
                isinstance(m, dict) for m in self.metric_list
            ):
                raise JaxevalError(
                    "metric_list must be a list of mappings",
                    task=task,
                    file=src,
                    field="metric_list",
                )
            for entry in self.metric_list:
                if "metric" not in entry:
                    raise JaxevalError(
                        "an entry of metric_list has no 'metric' key",
                        task=task,
                        file=src,
                        field="metric_list",
                        hint="write `- metric: acc`",
                    )
        fs = self.fewshot_config
        if fs is None or isinstance(fs, dict):
            raw = dict(fs or {})
            _unknown_keys(FewshotConfig, raw, task=task, source=src)
            inherited = {
                "split": self.fewshot_split,
                "process_docs": self.process_docs,
                "fewshot_delimiter": self.fewshot_delimiter,
                "target_delimiter": self.target_delimiter,
                "gen_prefix": self.gen_prefix,
                "doc_to_text": self.doc_to_text,
                "doc_to_choice": self.doc_to_choice,
                "doc_to_target": self.doc_to_target,
            }
            object.__setattr__(self, "_fewshot_given", fs is not None)
            object.__setattr__(self, "fewshot", FewshotConfig(**{**inherited, **raw}))
        else:
            object.__setattr__(self, "_fewshot_given", True)
            object.__setattr__(self, "fewshot", fs)

    @classmethod
    def from_dict(cls, raw: dict, *, source: str | None = None) -> TaskConfig:
        """Parses a merged YAML dict; structural keys must already be removed."""
        raw = {k: v for k, v in raw.items() if k not in STRUCTURAL_KEYS}
        _unknown_keys(cls, raw, task=raw.get("task"), source=source)
        try:
            return cls(**raw)
        except JaxevalError as e:
            raise e.located(task=raw.get("task"), file=source) from None

    def replace(self, **changes: Any) -> TaskConfig:
        return dataclasses.replace(self, **changes)

    @property
    def version(self) -> Any:
        meta = self.metadata if isinstance(self.metadata, dict) else {}
        return meta.get("version", "Yaml")

    def to_dict(self) -> dict[str, Any]:
        """Printable form for the results file's `configs`: None dropped, callables as source text."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "fewshot_config":
                # Always present, with the inherited defaults, as lm-eval dumps it (functions kept as
                # objects there, exactly like lm-eval; the JSON writer prints them with str()).
                out[f.name] = dataclasses.asdict(self.fewshot)  # type: ignore[attr-defined]
                continue
            if value is None:
                continue
            if f.name == "metric_list":
                value = [{k: _printable(v) for k, v in m.items()} for m in value]
            else:
                value = _printable(value)
            out[f.name] = value
        return out


def _printable(value: Any) -> Any:
    if callable(value):
        try:
            return inspect.getsource(value)
        except (TypeError, OSError):
            return str(value)
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggMetricConfig:
    """One entry of a group's `aggregate_metric_list` (lm-eval 0.4.12+ defaults)."""

    metric: str
    filter_list: list[str] | None = None
    aggregation: str | Callable = "mean"
    weight_by_size: bool = True

    def __post_init__(self) -> None:
        if self.aggregation != "mean" and not callable(self.aggregation):
            raise JaxevalError(
                f"group aggregation '{self.aggregation}' is not supported; only 'mean' (or a !function)",
                field="aggregate_metric_list",
            )
        if isinstance(self.filter_list, str):
            object.__setattr__(self, "filter_list", [self.filter_list])


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupConfig:
    """A group YAML: children, display alias, how to aggregate, metadata."""

    group: str
    group_alias: str | None = None
    task: list | None = None
    aggregate_metric_list: list[AggMetricConfig] | None = None
    metadata: dict | None = None

    def __post_init__(self) -> None:
        if isinstance(self.task, str):
            object.__setattr__(self, "task", [self.task])
        agg = self.aggregate_metric_list
        if agg is not None:
            if isinstance(agg, (dict, AggMetricConfig)):
                agg = [agg]
            parsed = []
            for item in agg:
                if isinstance(item, dict):
                    _unknown_keys(AggMetricConfig, item, task=self.group, source=None)
                    item = AggMetricConfig(**item)
                parsed.append(item)
            object.__setattr__(self, "aggregate_metric_list", parsed)

    @property
    def version(self) -> str:
        return "N/A" if not self.metadata else str(self.metadata.get("version", "N/A"))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: _printable(v) for k, v in out.items()}


GROUP_FIELDS = frozenset(f.name for f in dataclasses.fields(GroupConfig))
