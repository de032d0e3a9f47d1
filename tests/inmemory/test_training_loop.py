"""Evaluation during training: new parameters, same executables (nothing recompiles), the usual
results dict; parameter updates and the response cache refuse what they cannot do."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxeval
from jaxeval.errors import JaxevalError
from jaxeval.inmemory import InMemoryLM
from jaxeval.platform.compile_cache import CompileCounter
from tests.inmemory.conftest import MAX_LENGTH

TASKS = ["demo_arc_easy", "demo_wikitext", "demo_gsm8k"]  # multiple choice, rolling, generation


def _evaluate(lm):
    return jaxeval.simple_evaluate(
        model=lm,
        tasks=TASKS,
        limit=2,
        gen_kwargs="max_gen_toks=4",
        bootstrap_iters=0,
        log_samples=False,
    )


@pytest.fixture(scope="module")
def lm(nnx_model, tokenizer):
    from examples.nnx_llama import NnxLlama

    return InMemoryLM.from_nnx(
        nnx_model,
        tokenizer=tokenizer,
        max_length=MAX_LENGTH,
        hidden=NnxLlama.hidden,
        head_weight=NnxLlama.head_weight,
        name="tiny-run",
        step=0,
    )


@pytest.mark.slow
def test_second_evaluation_compiles_nothing(lm, nnx_model):
    from flax import nnx

    first = _evaluate(lm)
    scoring, generation = lm.scorer.compile_count, lm.generator.compile_count
    assert scoring >= 1 and generation >= 1
    # "training": a new module of the same shapes, its parameters already on the device
    trained = nnx.clone(nnx_model)
    trained.lm_head[...] = 0.5 * trained.lm_head[...]
    lm.update_params(trained, step=100)
    assert lm.scorer.params["lm_head"][...] is trained.lm_head[...]  # no copy
    before = CompileCounter.get().snapshot()
    second = _evaluate(lm)
    assert CompileCounter.get().since(before) == (0, 0)  # nothing compiled, nothing loaded
    assert (lm.scorer.compile_count, lm.generator.compile_count) == (scoring, generation)
    assert lm.stats["compilations"] == 0
    ppl = [r["results"]["demo_wikitext"]["word_perplexity,none"] for r in (first, second)]
    assert ppl[0] != ppl[1]  # the new weights were used
    assert second["config"]["model"] == "InMemoryLM"
    assert second["config"]["in_memory"] == {
        "name": "tiny-run",
        "step": 100,
        "generation": "recompute",
        "packing": True,
    }
    assert set(second["results"]) == set(TASKS)


def test_update_params_checks_tree_shapes_and_placement(lm, nnx_model):
    state = jax.tree.map(lambda x: x, lm.scorer.params)
    bad = jax.tree.map(lambda x: x, state)
    bad["lm_head"] = bad["lm_head"].replace(np.zeros((3, 3), np.float32))
    with pytest.raises(JaxevalError, match=r"parameter .*lm_head.* is float32\[3, 3\]"):
        lm.update_params(bad)
    with pytest.raises(JaxevalError, match="tree differs"):
        lm.update_params({"w": np.zeros(3)})
    moved = jax.tree.map(lambda x: jax.device_put(x, jax.devices()[1]), state)
    lm.update_params(moved)  # another device: moved back onto the mesh, on device
    leaf = lm.scorer.params["embed"][...]
    assert leaf.sharding.is_equivalent_to(state["embed"][...].sharding, leaf.ndim)
    lm.update_params(nnx_model)


def test_response_cache_needs_a_name(nnx_model, tokenizer, lm, tmp_path):
    from examples.nnx_llama import NnxLlama

    anonymous = InMemoryLM.from_nnx(
        nnx_model,
        tokenizer=tokenizer,
        max_length=MAX_LENGTH,
        hidden=NnxLlama.hidden,
        head_weight=NnxLlama.head_weight,
    )
    with pytest.raises(JaxevalError, match="use_cache.*needs a name"):
        jaxeval.simple_evaluate(
            model=anonymous, tasks=["demo_arc_easy"], limit=1, use_cache=str(tmp_path / "c")
        )
    key = lm.fingerprint()
    lm.update_params(nnx_model, step=101)
    assert lm.fingerprint() != key  # answers of another step are never served
