"""Compile only what runs (issue 10): one compilation per distinct batch shape a plan uses, and a
second run with the persistent compilation cache compiles nothing."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxeval.lm.jax_lm import JaxLM
from jaxeval.models import load_model
from jaxeval.platform import compile_cache
from jaxeval.platform.mesh import make_mesh
from tests.helpers.tiny_models import tiny_checkpoint
from tests.lm.conftest import MAX_LENGTH, our_instances

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded():
    return load_model(tiny_checkpoint("llama"), mesh=make_mesh("single"), dtype="float32")


def _score(lm, workload):
    args = workload["arc_easy"] + workload["lambada"]
    out = lm.loglikelihood(our_instances("loglikelihood", args), disable_tqdm=True)
    shapes = set(lm.last_plan.shapes)
    rolling = lm.loglikelihood_rolling(
        our_instances("loglikelihood_rolling", workload["wikitext"][:1]), disable_tqdm=True
    )
    return np.array([o[0] for o in out] + rolling), shapes | set(lm.last_plan.shapes)


def test_compile_count_equals_distinct_shapes_used(loaded, workload):
    lm = JaxLM(pretrained=loaded, max_length=MAX_LENGTH)
    _, used = _score(lm, workload)
    assert lm.buckets.fit_rows and len(lm.buckets) > 3 * len(used)
    assert lm.scorer.compile_count == len(used) == lm.totals["compilations"]
    assert lm.totals["efficiency"] >= 0.9
    compiled_before = lm.scorer.compile_count
    _score(lm, workload)  # the same shapes again: nothing new
    assert lm.scorer.compile_count == compiled_before and lm.stats["compilations"] == 0


def test_warm_run_compiles_nothing(loaded, workload, tmp_path):
    assert compile_cache.resolve() is None  # tests run with JAXEVAL_COMPILATION_CACHE=off
    try:
        cold = JaxLM(pretrained=loaded, max_length=MAX_LENGTH, compilation_cache=str(tmp_path))
        assert cold.compilation_cache == str(tmp_path)
        ll_cold, used = _score(cold, workload)
        assert cold.totals["compilations"] == len(used) and cold.totals["cache_hits"] == 0
        jax.clear_caches()  # a new process: nothing in memory, only the files
        warm = JaxLM(pretrained=loaded, max_length=MAX_LENGTH, compilation_cache=str(tmp_path))
        ll_warm, _ = _score(warm, workload)
        assert warm.totals["compilations"] == 0
        assert warm.totals["cache_hits"] == len(used)
        assert warm.model_info()["scoring_stats"]["cache_hits"] == len(used)
        np.testing.assert_array_equal(ll_warm, ll_cold)
    finally:
        compile_cache.enable("off")
