"""Per-document scoring by output type, and the task's metric/filter tables, as lm-eval computes them.

Output types dispatch through `OUTPUT_SCORERS` (a table, not an if/elif ladder):

    multiple_choice, results [(-4.1, False), (-2.0, False), (-3.3, False)], gold 1, choices ["a","bb","c"]
    -> {"acc": 1.0, "acc_norm": 1.0}   (acc_norm divides by each choice's length in characters)

Scoring only returns values: it reads the task through `ScoredTask` (its config, targets, choices
and `MetricTable`) and never writes to it. A metric that returns a dict (`{"rouge1": .., "rouge2":
..}`) yields sub-metrics; the `MetricValues` returned name each one's parent metric in `.derived`,
and the results side gives them the parent's aggregation and direction (`MetricTable.with_derived`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from jaxeval.api.config import TaskConfig
from jaxeval.errors import JaxevalError
from jaxeval.filters import build_filter_ensemble
from jaxeval.metrics import AGGREGATIONS, DEFAULT_METRICS, METRICS
from jaxeval.metrics.hf_evaluate import HF_EVALUATE, missing_message

log = logging.getLogger(__name__)
_NOT_METRIC_KWARGS = ("metric", "aggregation", "higher_is_better", "hf_evaluate")


@dataclasses.dataclass(frozen=True)
class MetricTable:
    """A task's metrics by name: function, keyword arguments, aggregation and direction."""

    fns: Mapping[str, Callable | None]
    kwargs: Mapping[str, dict]
    aggregations: Mapping[str, Callable | None]
    higher_is_better: Mapping[str, bool | None]

    def with_derived(self, derived: Mapping[str, str]) -> MetricTable:
        """The table plus sub-metrics `{sub: parent}`, each with its parent's aggregation and
        direction (a name the table already has keeps its own)."""
        aggs, hib = dict(self.aggregations), dict(self.higher_is_better)
        for sub, parent in derived.items():
            aggs.setdefault(sub, self.aggregations.get(parent))
            hib.setdefault(sub, self.higher_is_better.get(parent))
        return dataclasses.replace(self, aggregations=aggs, higher_is_better=hib)


@runtime_checkable
class ScoredTask(Protocol):
    """What the scorers read of a task (`jaxeval.api.task.Task` is one): its config, its metric
    table, whether targets are lists, and its target/choice/gold accessors. Read-only."""

    @property
    def config(self) -> TaskConfig: ...

    @property
    def metric_table(self) -> MetricTable: ...

    @property
    def multiple_target(self) -> int: ...

    def doc_to_target(self, doc: dict, *, doc_index: int | None = None) -> Any: ...

    def doc_to_choice(self, doc: dict, *, doc_index: int | None = None) -> list[str]: ...

    def gold_index(
        self, doc: dict, choices: list[str], doc_index: int | None = None
    ) -> int | list[int]: ...


class MetricValues(dict):
    """One document's metric values; `derived` maps each sub-metric (a key of a dict-valued
    metric's result) to the metric that produced it."""

    def __init__(self, *args: Any, derived: Mapping[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.derived: dict[str, str] = dict(derived or {})


def single_metric_table(metric_name: str) -> MetricTable:
    """`--predict_only`: one registered metric in place of a task's own (lm-eval's
    `override_metric`)."""
    m = METRICS.get(metric_name)
    return MetricTable(
        fns={metric_name: m.fn},
        kwargs={metric_name: {}},
        aggregations={metric_name: AGGREGATIONS.get(m.aggregation)},
        higher_is_better={metric_name: m.higher_is_better},
    )


def resolve_metrics(config: TaskConfig) -> MetricTable:
    """The task's `MetricTable` from its `metric_list` (or the output type's default metrics)."""
    fns: dict[str, Callable | None] = {}
    kwargs: dict[str, dict] = {}
    aggs: dict[str, Callable] = {}
    hib: dict[str, bool] = {}
    task, src = config.task, (config.metadata or {}).get("config_source")

    def lookup(name: str):
        if name not in METRICS:
            raise JaxevalError(METRICS.miss_message(name), task=task, file=src, field="metric_list")
        return METRICS.get(name)

    if config.metric_list is None:
        for name in DEFAULT_METRICS[config.output_type]:
            m = lookup(name)
            fns[name], kwargs[name] = m.fn, {}
            aggs[name], hib[name] = AGGREGATIONS.get(m.aggregation), m.higher_is_better
        return MetricTable(fns, kwargs, aggs, hib)
    for entry in config.metric_list:
        name = entry["metric"]
        extra = {k: v for k, v in entry.items() if k not in _NOT_METRIC_KWARGS}
        if callable(name):
            fn, name = name, name.__name__
            registered = None
        elif config.process_results is not None:
            fn, registered = None, METRICS.get(name) if name in METRICS else None
        elif entry.get("hf_evaluate") is True or (name not in METRICS and name in HF_EVALUATE):
            # lm-eval takes these from HF `evaluate`; ours are local (jaxeval/metrics/hf_evaluate.py)
            if name not in HF_EVALUATE:
                raise JaxevalError(missing_message(name), task=task, file=src, field="metric_list")
            fn, registered = HF_EVALUATE.get(name), None
        else:
            registered = lookup(name)
            fn = registered.fn
        fns[name], kwargs[name] = fn, (extra if fn is not None else {})
        agg = entry.get("aggregation")
        if callable(agg):
            aggs[name] = agg
        elif isinstance(agg, str):
            if agg not in AGGREGATIONS:
                raise JaxevalError(
                    AGGREGATIONS.miss_message(agg),
                    task=task,
                    file=src,
                    field="metric_list.aggregation",
                )
            aggs[name] = AGGREGATIONS.get(agg)
        elif registered is not None:
            aggs[name] = AGGREGATIONS.get(registered.aggregation)
        else:
            raise JaxevalError(
                f"metric '{name}' needs an explicit aggregation",
                task=task,
                file=src,
                field="metric_list",
                hint="add `aggregation: mean` (or another)",
            )
        if "higher_is_better" in entry:
            hib[name] = entry["higher_is_better"]
        elif registered is not None:
            hib[name] = registered.higher_is_better
        else:
            hib[name] = True
    return MetricTable(fns, kwargs, aggs, hib)


def resolve_filters(config: TaskConfig) -> list:
    if config.filter_list is None:
        return [build_filter_ensemble("none", [("take_first", {})])]
    out = []
    filter_list = (
        config.filter_list if isinstance(config.filter_list, list) else [config.filter_list]
    )
    for i, spec in enumerate(filter_list):
        if not isinstance(spec, dict) or "name" not in spec or "filter" not in spec:
            raise JaxevalError(
                f"filter_list entry {i} needs 'name' and 'filter' keys",
                task=config.task,
                field="filter_list",
            )
        components = []
        for fn in spec["filter"]:
            if "function" not in fn:
                raise JaxevalError(
                    f"a filter of pipeline '{spec['name']}' has no 'function'",
                    task=config.task,
                    field="filter_list",
                )
            components.append((fn["function"], {k: v for k, v in fn.items() if k != "function"}))
        try:
            out.append(build_filter_ensemble(spec["name"], components))
        except JaxevalError as e:
            raise JaxevalError(str(e), task=config.task, field="filter_list") from None
    return out


def count_words(text: str) -> int:
    return len(re.split(r"\s+", text))


def count_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _softmax(x: Any) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def score_loglikelihood(task: ScoredTask, doc: dict, results: list, doc_index: int | None) -> dict:
    ll, is_greedy = results[0]
    out: dict[str, Any] = {}
    if "perplexity" in task.metric_table.fns:
        out["perplexity"] = ll
    if "acc" in task.metric_table.fns:
        out["acc"] = int(is_greedy)
    return out


def score_rolling(task: ScoredTask, doc: dict, results: list, doc_index: int | None) -> dict:
    (ll,) = results
    target = task.doc_to_target(doc, doc_index=doc_index)
    words, nbytes = count_words(target), count_bytes(target)
    pairs = {
        "word_perplexity": (ll, words),
        "byte_perplexity": (ll, nbytes),
        "bits_per_byte": (ll, nbytes),
    }
    return {k: v for k, v in pairs.items() if k in task.metric_table.fns}


def score_multiple_choice(
    task: ScoredTask, doc: dict, results: list, doc_index: int | None
) -> dict:
    lls, is_greedy = zip(*results)
    choices = task.doc_to_choice(doc, doc_index=doc_index)
    completion_len = np.array([float(len(c)) for c in choices])
    byte_len = np.array([float(len(c.encode("utf-8"))) for c in choices])
    use = task.metric_table.fns
    if 2 * len(choices) == len(lls) and "acc_mutual_info" in use:
        lls_uncond, lls = lls[len(choices) :], lls[: len(choices)]
    pred = np.argmax(lls)
    pred_norm = np.argmax(lls / completion_len)
    pred_byte = np.argmax(lls / byte_len)
    gold = task.gold_index(doc, choices, doc_index)
    if task.multiple_target:
        golds = gold if isinstance(gold, list) else [gold]
        acc, acc_norm, acc_bytes = (
            1.0 if p in golds else 0.0 for p in (pred, pred_norm, pred_byte)
        )
        exact = int(any(is_greedy[i] for i in golds))
    else:
        acc, acc_norm, acc_bytes = (1.0 if p == gold else 0.0 for p in (pred, pred_norm, pred_byte))
        exact = int(is_greedy[gold])
    values = {
        "acc": lambda: acc,
        "f1": lambda: (gold, pred),
        "mcc": lambda: (gold, pred),
        "acc_norm": lambda: acc_norm,
        "acc_bytes": lambda: acc_bytes,
        "exact_match": lambda: exact,
        "brier_score": lambda: (gold, _softmax(lls)),
        "likelihood": lambda: (gold, lls),
    }
    out = {k: fn() for k, fn in values.items() if k in use}
    if "acc_mutual_info" in use:
        mi = [c - u for c, u in zip(lls, lls_uncond)]
        out["acc_mutual_info"] = 1.0 if np.argmax(mi) == gold else 0.0
    return out


def score_generation(
    task: ScoredTask, doc: dict, results: list, doc_index: int | None
) -> MetricValues:
    gold = task.doc_to_target(doc, doc_index=doc_index)
    result = results[0]
    if task.config.doc_to_choice is not None:
        gold = task.doc_to_choice(doc, doc_index=doc_index)[gold]
    elif task.multiple_target:
        gold = list(gold)
    elif type(gold) is not type(result) and not (
        "bypass" in task.metric_table.fns or isinstance(result, list)
    ):
        gold = type(result)(gold)
    out, table = MetricValues(), task.metric_table
    for metric, fn in table.fns.items():
        kwargs = table.kwargs[metric]
        if task.multiple_target:
            golds = gold if isinstance(gold, list) else [gold]
            if metric == "exact_match":
                score = fn(references=golds, predictions=[result] * len(golds), **kwargs)[metric]
                value: Any = 1.0 if score > 0.0 else 0.0
            else:
                scores = []
                for g in golds:
                    s = _call_metric(fn, g, result, kwargs)
                    scores.append(s[metric] if isinstance(s, dict) else s)
                value = 1.0 if any(scores) else 0.0
        else:
            value = _call_metric(fn, gold, result, kwargs)
        if isinstance(value, dict):
            for k, v in value.items():
                out[k] = v
                out.derived[k] = metric
        else:
            out[metric] = value
    return out


def _call_metric(fn: Callable, gold: Any, result: Any, kwargs: dict) -> Any:
    try:
        return fn(references=[gold], predictions=[result], **kwargs)
    except TypeError:
        return fn([gold, result])


OUTPUT_SCORERS: dict[str, Callable[..., dict]] = {
    "loglikelihood": score_loglikelihood,
    "loglikelihood_rolling": score_rolling,
    "multiple_choice": score_multiple_choice,
    "generate_until": score_generation,
}
