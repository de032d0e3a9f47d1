"""Metrics, aggregations and standard errors with lm-eval 0.4.13 parity.

    METRICS.get("acc")             -> Metric(name="acc", aggregation="mean", higher_is_better=True, ...)
    AGGREGATIONS.get("perplexity") -> exp(-mean(loglikelihoods))
    stderr_for_aggregation("mean", 100_000)(xs) -> mean_stderr(xs)

DROP's scoring lives in `jaxeval.metrics.drop` (named from task YAML via `!function`).
"""

from jaxeval.metrics.builtin import AGGREGATIONS, DEFAULT_METRICS, METRICS, Metric
from jaxeval.metrics.exact_match import exact_match_score
from jaxeval.metrics.groups import (
    aggregate_subtask_metrics,
    pooled_sample_stderr,
    unweighted_mean_stderr,
)
from jaxeval.metrics.stderr import (
    acc_all_stderr,
    bootstrap_stderr,
    mean_stderr,
    sample_stddev,
    stderr_for_aggregation,
)

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_METRICS",
    "METRICS",
    "Metric",
    "acc_all_stderr",
    "aggregate_subtask_metrics",
    "bootstrap_stderr",
    "exact_match_score",
    "mean_stderr",
    "pooled_sample_stderr",
    "sample_stddev",
    "stderr_for_aggregation",
    "unweighted_mean_stderr",
]
