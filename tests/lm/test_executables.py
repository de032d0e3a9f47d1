"""The compile boundary (`jaxeval.lm.executables`): one class compiles every executable of a
Scorer and of a Generator, counts them the same way, and compiles for a mesh it never runs on."""

from __future__ import annotations

import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.errors import JaxevalError
from jaxeval.lm.executables import Executables, Job
from jaxeval.lm.generate.config import GenConfig
from jaxeval.lm.jax_lm import JaxLM
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.score.buckets import parse_buckets
from jaxeval.lm.score.scorer import Scorer
from jaxeval.models import load_model
from jaxeval.platform.mesh import make_mesh
from tests.helpers.tiny_models import tiny_checkpoint
from tests.lm.conftest import MAX_LENGTH, our_instances


@pytest.fixture(scope="module")
def loaded():
    return load_model(tiny_checkpoint("llama"), mesh=make_mesh("single"), dtype="float32")


def _job(key, n):
    x = jax.ShapeDtypeStruct((n, 8), np.float32)
    return Job(key, lambda a: jnp.tanh(a) @ a.T, (x,))


def test_each_key_compiles_once_and_the_counters_agree():
    exe = Executables()
    exe.ahead([_job("a", 3), _job("b", 5)])
    exe.ahead([_job("a", 3)])  # queued already: nothing new
    run = exe.get(_job("a", 3))
    assert exe.get(_job("a", 3)) is run  # compiled before: the same executable
    exe.get(_job("c", 7))  # never queued: compiled on this thread
    exe.get(_job("b", 5))  # queued ahead: waited for
    assert sorted(exe.keys()) == ["a", "b", "c"] and exe.compile_count == 3
    stats = exe.stats()
    assert stats["compilations"] + stats["cache_hits"] == 3  # thread and caller both counted
    assert stats["compile_s"] > 0 and stats["compile_wait_s"] >= 0
    out = run(np.ones((3, 8), np.float32))
    np.testing.assert_allclose(out, np.full((3, 3), 8 * np.tanh(1.0)), rtol=1e-6)


def test_counts_stay_exact_when_two_threads_compile_at_once():
    """Each compile is counted by the thread that ran it, so a compile on another thread at the
    same time is never counted twice (or by the wrong owner)."""
    ours, theirs = Executables(), Executables()
    done = threading.Event()

    def other():
        for n in range(4):
            theirs.get(_job(("t", n), 11 + n))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    for n in range(4):
        ours.get(_job(("o", n), 21 + n))
    thread.join()
    assert done.is_set()
    for exe in (ours, theirs):
        assert exe.compilations + exe.cache_hits == 4, exe.stats()


def test_scoring_stats_come_from_the_scorers_executables(loaded, workload):
    lm = JaxLM(pretrained=loaded, max_length=MAX_LENGTH)
    lm.loglikelihood(our_instances("loglikelihood", workload["arc_easy"]), disable_tqdm=True)
    stats = lm.scorer.executables.stats()
    info = lm.model_info()["scoring_stats"]
    assert info["compile_count"] == stats["compile_count"] == len(lm.scorer.executables)
    assert info["compilations"] + info["cache_hits"] == stats["compile_count"]
    assert set(lm.scorer.executables.keys()) == set(lm.last_plan.shapes)


def test_one_generator_per_adapter_with_its_own_counts(loaded):
    lm = JaxLM(pretrained=loaded, max_length=64, gen_batch_size=2, seed=7, gen_min_prefix=0)
    # gen_batch_size given: checked against the memory, never cut (`sizing.engine_rows`)
    assert lm.gen_config == GenConfig(batch_size=2, seed=7, min_prefix=0, fit_rows=False)
    requests = our_instances("generate_until", [("Hello", {"max_gen_toks": 4})] * 2)
    first = lm.generate_until(requests, disable_tqdm=True)
    gen = lm.generator
    assert gen is not None and gen.config == lm.gen_config
    count = gen.compile_count
    assert lm.generate_until(requests, disable_tqdm=True) == first
    assert lm.generator is gen and gen.compile_count == count  # kept, nothing recompiled
    assert gen.stats["compile_count"] == count and gen.stats["compilations"] == 0
    assert lm.model_info()["generation_stats"]["compile_count"] == count


def test_generation_model_args_build_a_frozen_gen_config():
    config = JaxLMConfig.from_kwargs(
        {"pretrained": "/m", "batch_size": 4, "gen_continuous": False, "max_gen_toks": 64}
    )
    assert config.generation == GenConfig(continuous=False, max_gen_toks=64)
    assert config.gen_config.batch_size == 64  # from lm-eval's batch_size, at least 64
    with pytest.raises(JaxevalError, match="admission='fifo' is not one of longest, request"):
        JaxLMConfig.from_kwargs({"pretrained": "/m", "gen_admission": "fifo"})
    with pytest.raises(JaxevalError, match="not both"):
        JaxLMConfig.from_kwargs({"pretrained": "/m", "seed": 1, "generation": GenConfig()})
    for name in ("gen_batch_size", "seed", "gen_tail", "attention"):
        assert name in JaxLMConfig.names()
    with pytest.raises(dataclasses.FrozenInstanceError):
        GenConfig().seed = 3  # type: ignore[misc]


def test_abstract_scorer_compiles_for_a_mesh_it_never_runs_on(loaded):
    """Abstract parameters on another mesh (8 devices, the model axis sharding the MLP): every
    bucket compiles and `describe` reads XLA's memory and cost analysis; nothing is allocated."""
    assert len(jax.devices()) >= 8
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))

    def abstract(x, path):
        spec = P()
        if "mlp" in jax.tree_util.keystr(path) and x.ndim == 3:  # [L, D, F] / [L, F, D]
            spec = P(None, None, "model") if x.shape[2] % 2 == 0 else P()
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec))

    params = jax.tree_util.tree_map_with_path(lambda p, x: abstract(x, p), loaded.params)
    grid = parse_buckets(None, max_length=MAX_LENGTH, token_budget=1024, row_multiple=4)
    scorer = Scorer(model=loaded.spec, params=params, mesh=mesh, buckets=grid)
    buckets = list(grid)[:2]
    scorer.warmup(buckets)
    assert scorer.compile_count == 2
    facts = scorer.executables.describe(buckets[0])
    assert facts["flops"] > 0 and facts["argument_bytes"] > 0
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(scorer.params))
