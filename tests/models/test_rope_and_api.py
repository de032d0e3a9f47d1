"""Rope scaling variants against transformers, the head decomposition the kernels rely on, the mesh
presets, and the public surface."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import jaxeval.models as models_pkg
from jaxeval.errors import JaxevalError
from jaxeval.platform.mesh import batch_sharding, load_presets, make_mesh
from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits

ROPE_VARIANTS = {
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    # max_position_embeddings 16 < T = 24, so the NTK base actually grows on this batch
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 32,
    },
}


@pytest.mark.parametrize("variant", sorted(ROPE_VARIANTS))
def test_llama_rope_scaling_variants(models, variant):
    extra = {"max_position_embeddings": 16} if variant == "dynamic" else {}
    loaded, torch_model = models("llama", rope_parameters=ROPE_VARIANTS[variant], **extra)
    tokens = np.random.default_rng(9).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
    assert_logits_close(ours, torch_logits(torch_model, tokens), variant)


def test_phi3_longrope_switches_tables_like_transformers(models):
    """LongRoPE with original length 16: T = 12 uses the short table, T = 24 the long one."""
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "short_factor": [1.0, 1.5, 2.0, 3.0],
        "long_factor": [1.0, 4.0, 9.0, 20.0],
    }
    loaded, torch_model = models("phi3", rope_parameters=rope, original_max_position_embeddings=16)
    assert loaded.spec.rope[0].long_after == 16 and loaded.spec.rope[0].attention_factor > 1
    for t in (12, 24):
        tokens = np.random.default_rng(t).integers(0, 512, (2, t)).astype(np.int32)
        ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
        assert_logits_close(ours, torch_logits(torch_model, tokens), f"longrope T={t}")


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_head_equals_chunked_head_weight_and_finalize(models, family):
    loaded, _ = models(family)
    spec, params = loaded.spec, loaded.params
    h = np.random.default_rng(0).standard_normal((3, spec.hidden_size)).astype(np.float32)
    full = np.asarray(spec.head(params, h))
    w = np.asarray(spec.head_weight(params))
    assert w.shape == (spec.vocab_size, spec.hidden_size)
    chunks = [
        np.asarray(spec.finalize_logits(jax.numpy.asarray(h @ w[i : i + 100].T)))
        for i in range(0, spec.vocab_size, 100)
    ]
    np.testing.assert_allclose(np.concatenate(chunks, -1), full, rtol=1e-5, atol=1e-5)


def test_spec_is_hashable_and_static(models):
    spec = models("llama")[0].spec
    assert hash(spec) == hash(dataclasses.replace(spec))
    assert spec.vocab_size == 512 and spec.hidden_size == 64 and spec.num_layers == 2
    assert spec.max_position_embeddings == 512
    assert spec.param_count(models("llama")[0].params) == spec.param_count()


def test_fully_masked_rows_are_finite(models):
    loaded, _ = models("gemma2")
    tokens = np.zeros((2, 24), np.int32)
    zeros = np.zeros((2, 24), np.int32)
    out = logits_fn(loaded.spec, loaded.params, tokens, zeros, zeros, zeros)
    assert np.isfinite(np.asarray(out)).all()


def test_mesh_presets_and_batch_sharding():
    presets = load_presets()
    assert {"single", "data", "data_model", "fsdp"} <= set(presets)
    single = make_mesh("single")
    assert single.axis_names == ("data", "fsdp", "model") and single.size == 1
    if len(jax.devices()) == 8:
        assert dict(make_mesh("data_model").shape) == {"data": 2, "fsdp": 1, "model": 4}
        assert dict(make_mesh("data_model", model=2).shape) == {"data": 4, "fsdp": 1, "model": 2}
        assert dict(make_mesh("fsdp").shape) == {"data": 1, "fsdp": 8, "model": 1}
        mesh = make_mesh("data_model")
        assert batch_sharding(mesh, (8, 16)).spec == jax.sharding.PartitionSpec("data", None)
        assert batch_sharding(mesh, (3, 16)).spec == jax.sharding.PartitionSpec(None, None)
    with pytest.raises(JaxevalError, match="unknown mesh preset"):
        make_mesh("nope")


def test_public_surface():
    expected = {
        "KVCache",
        "LOGICAL_AXIS_RULES",
        "cache_shardings",
        "LoadedModel",
        "ModelSpec",
        "REFERENCE",
        "Runtime",
        "SUPPORTED_MODEL_TYPES",
        "load_model",
        "make_runtime",
        "param_count",
        "param_shardings",
        "spec_from_config",
    }
    assert set(models_pkg.__all__) == expected
    assert all(hasattr(models_pkg, name) for name in expected)
    assert {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "gpt2",
        "gpt_neox",
    } <= set(models_pkg.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("family", ["olmo2", "gemma3", "gpt2"])
@pytest.mark.slow
def test_init_params_match_the_loaded_layout(models, family):
    loaded, _ = models(family)
    spec = loaded.spec
    params = spec.init_params(jax.random.key(0))
    assert jax.tree.structure(params) == jax.tree.structure(loaded.params)
    assert all(
        a.shape == b.shape for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(loaded.params))
    )
    tokens = np.zeros((2, 24), np.int32)
    out = logits_fn(spec, params, tokens, *full_rows(tokens))
    assert np.isfinite(np.asarray(out)).all()
