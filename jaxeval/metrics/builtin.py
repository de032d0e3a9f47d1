"""The built-in tables: `AGGREGATIONS`, `METRICS` and `DEFAULT_METRICS`, as lm-eval 0.4.13 registers them.

A `Metric` names its per-document function, its default aggregation and direction. Per-document
functions keep lm-eval's calling convention so the task engine calls them the same way:

* the generation metric `exact_match` takes keywords only:
  `fn(references=[gold], predictions=[pred], **metric_kwargs) -> {"exact_match": value}`;
* every other built-in is a one-argument passthrough (`fn(items) -> items`; `bypass` returns None).
  Called with keywords it raises TypeError, and the engine then calls `fn([gold, pred])`, which is how
  bleu/chrf/ter collect their `(reference, prediction)` pairs in lm-eval.

For loglikelihood and multiple-choice tasks the engine computes the per-document value itself
(acc = is_greedy, acc_norm = argmax of length-normalised loglikelihoods, ...); `fn` is then unused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.metrics import aggregations as agg
from jaxeval.metrics import classification, translation
from jaxeval.metrics.exact_match import exact_match
from jaxeval.registry import Registry

AGGREGATIONS: Registry[Callable[[list], float]] = Registry("aggregation")
for _name, _fn in {
    "bypass": agg.bypass,
    "nanmean": agg.nanmean,
    "mean": agg.mean,
    "median": agg.median,
    "perplexity": agg.perplexity,
    "weighted_perplexity": agg.weighted_perplexity,
    "bits_per_byte": agg.bits_per_byte,
    "f1": classification.f1,
    "matthews_corrcoef": classification.matthews_corrcoef,
    "bleu": translation.bleu,
    "chrf": translation.chrf,
    "chrf++": translation.chrfpp,
    "ter": translation.ter,
    "brier_score": agg.brier_score,
    # Not a registered aggregation in lm-eval (its `acc_all` metric defaults to `mean`); here so a
    # task can name it, with the closed-form stderr lm-eval pairs with it.
    "acc_all": agg.acc_all,
}.items():
    AGGREGATIONS.add(_name, _fn)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Metric:
    """A registered metric: per-document `fn`, default `aggregation` name, and direction."""

    name: str
    fn: Callable[..., Any]
    aggregation: str
    higher_is_better: bool
    output_types: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise JaxevalError(
                f"metric '{self.name}': {AGGREGATIONS.miss_message(self.aggregation)}"
            )


def passthrough(items: Any) -> Any:
    """The per-document function of metrics computed by the task engine or at aggregation time."""
    return items


def bypass(items: Any) -> None:
    """The `bypass` metric's per-document function: records nothing (aggregates to 999)."""
    return None


_LL = "loglikelihood"
_ROLLING = "loglikelihood_rolling"
_MC = "multiple_choice"
_GEN = "generate_until"

METRICS: Registry[Metric] = Registry("metric")
# name, fn, aggregation, higher_is_better, output types (lm_eval/api/metrics.py order).
for _name, _fn, _agg, _hib, _types in (
    ("brier_score", passthrough, "brier_score", False, (_MC,)),
    ("acc", passthrough, "mean", True, (_LL, _MC)),
    ("acc_norm", passthrough, "mean", True, (_LL, _MC)),
    ("acc_mutual_info", passthrough, "mean", True, (_MC,)),
    ("acc_bytes", passthrough, "mean", True, (_LL, _MC)),
    ("exact_match", exact_match, "mean", True, (_GEN,)),
    ("perplexity", passthrough, "perplexity", False, (_LL,)),
    ("likelihood", passthrough, "mean", True, (_MC,)),
    ("word_perplexity", passthrough, "weighted_perplexity", False, (_ROLLING,)),
    ("byte_perplexity", passthrough, "weighted_perplexity", False, (_ROLLING,)),
    ("bits_per_byte", passthrough, "bits_per_byte", False, (_ROLLING,)),
    ("bypass", bypass, "bypass", True, (_LL, _MC, _GEN)),
    ("mcc", passthrough, "matthews_corrcoef", True, (_MC,)),
    ("f1", passthrough, "f1", True, (_MC,)),
    ("bleu", passthrough, "bleu", True, (_GEN,)),
    ("chrf", passthrough, "chrf", True, (_GEN,)),
    ("chrf++", passthrough, "chrf++", True, (_GEN,)),
    # lm-eval 0.4.13 registers ter as lower-is-better (older releases had it higher-is-better).
    ("ter", passthrough, "ter", False, (_GEN,)),
    # lm-eval registers acc_all with the `mean` aggregation; MultiRC-style scoring needs the
    # `acc_all` aggregation named explicitly in the task's metric_list.
    ("acc_all", passthrough, "mean", True, (_LL,)),
):
    METRICS.add(
        _name,
        Metric(name=_name, fn=_fn, aggregation=_agg, higher_is_better=_hib, output_types=_types),
    )

# The metrics a task gets when its config lists none, per output type.
DEFAULT_METRICS: dict[str, list[str]] = {
    _LL: ["perplexity", "acc"],
    _ROLLING: ["word_perplexity", "byte_perplexity", "bits_per_byte"],
    _MC: ["acc", "acc_norm"],
    _GEN: ["exact_match"],
}
