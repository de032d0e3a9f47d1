"""The public surface, and the metric tables against lm-eval 0.4.13's registries."""

import subprocess
import sys

import pytest

import jaxeval.metrics
from jaxeval.errors import JaxevalError
from jaxeval.metrics import AGGREGATIONS, DEFAULT_METRICS, METRICS, Metric

PUBLIC = {
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
}


def test_public_names():
    assert set(jaxeval.metrics.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(jaxeval.metrics, name)


def test_runtime_imports_no_test_only_package():
    code = (
        "import sys, jaxeval.metrics, jaxeval.metrics.drop, jaxeval.filters;"
        "bad = [m for m in ('lm_eval', 'torch', 'sklearn', 'sacrebleu') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tables_equal_lm_eval_registries():
    registry = pytest.importorskip("lm_eval.api.registry")
    import lm_eval.api.metrics  # noqa: F401  (fills the registries)

    lm_agg_names = {
        id(registry.AGGREGATION_REGISTRY.get(n)): n for n in registry.AGGREGATION_REGISTRY
    }
    assert set(AGGREGATIONS.names()) == set(lm_agg_names.values()) | {"acc_all"}
    assert set(METRICS.names()) == set(registry.METRIC_REGISTRY)
    for name in METRICS:
        metric = METRICS.get(name)
        lm_agg = registry.METRIC_AGGREGATION_REGISTRY.get(name)
        assert metric.aggregation == lm_agg_names[id(lm_agg)], name
        assert metric.higher_is_better == registry.HIGHER_IS_BETTER_REGISTRY.get(name), name
    assert DEFAULT_METRICS == registry.DEFAULT_METRIC_REGISTRY


def test_metric_rows():
    assert METRICS.get("acc") == Metric(
        name="acc",
        fn=METRICS.get("acc").fn,
        aggregation="mean",
        higher_is_better=True,
        output_types=("loglikelihood", "multiple_choice"),
    )
    assert METRICS.get("ter").higher_is_better is False  # lm-eval 0.4.13: lower is better
    assert METRICS.get("perplexity").aggregation == "perplexity"
    assert METRICS.get("word_perplexity").aggregation == "weighted_perplexity"
    assert METRICS.get("mcc").aggregation == "matthews_corrcoef"
    assert METRICS.get("acc").fn((0.1, True)) == (0.1, True)  # passthrough
    assert METRICS.get("bypass").fn([1]) is None
    for output_type, names in DEFAULT_METRICS.items():
        for name in names:
            assert output_type in METRICS.get(name).output_types


def test_misses_suggest_names():
    with pytest.raises(JaxevalError, match="acc_norm"):
        METRICS.get("acc_nrom")
    with pytest.raises(JaxevalError, match="perplexity"):
        AGGREGATIONS.get("perplexty")
    with pytest.raises(JaxevalError, match="metric 'x': unknown aggregation 'nope'"):
        Metric(name="x", fn=len, aggregation="nope", higher_is_better=True, output_types=())
