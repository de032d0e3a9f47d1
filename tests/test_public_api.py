"""Each package's public names import, and `import jaxeval` stays cheap (no JAX/datasets at import)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC = {
    "jaxeval": [
        "simple_evaluate",
        "evaluate",
        "TaskManager",
        "JaxevalError",
        "Instance",
        "LM",
        "__version__",
    ],
    "jaxeval.lm": [
        "LM",
        "MODELS",
        "parse_model_args",
        "JaxLM",
        "Encoder",
        "plan_score_batches",
        "generate_until",
    ],
    "jaxeval.metrics": [
        "METRICS",
        "AGGREGATIONS",
        "DEFAULT_METRICS",
        "stderr_for_aggregation",
        "pooled_sample_stderr",
        "aggregate_subtask_metrics",
        "bootstrap_stderr",
        "mean_stderr",
    ],
    "jaxeval.filters": ["FILTERS", "FilterEnsemble", "build_filter_ensemble"],
    "jaxeval.models": ["load_model", "LoadedModel", "ModelSpec", "SUPPORTED_MODEL_TYPES"],
    "jaxeval.models.experts": [
        "MoESpec",
        "moe_block",
        "ExpertBackend",
        "select_experts",
        "ExpertParallel",
    ],
    "jaxeval.kernels": ["score", "ScoreBatch", "generate", "GenerateBatch"],
    "jaxeval.lm.base": ["LM", "MODELS"],
    "jaxeval.report": ["load_runs", "compare_runs", "write_report", "mcnemar_exact", "paired_t"],
    "jaxeval.trackers": [
        "flatten_results",
        "TensorBoardLogger",
        "WandbStepLogger",
        "WandbTracker",
        "HubLogArgs",
        "plan_hub_upload",
        "check_hub_access",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names(module):
    mod = importlib.import_module(module)
    for name in PUBLIC[module]:
        assert getattr(mod, name) is not None, f"{module}.{name}"
    if hasattr(mod, "__all__"):
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.__all__ lists missing {name}"


def test_import_jaxeval_is_lazy():
    code = "import sys, jaxeval; print(any(m in sys.modules for m in ('jax', 'datasets', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_registry_miss_suggests():
    from jaxeval.errors import JaxevalError
    from jaxeval.metrics import METRICS

    with pytest.raises(JaxevalError, match="Did you mean 'acc_norm'"):
        METRICS.get("acc_nrm")
