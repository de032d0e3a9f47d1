"""Mixture-of-Experts and latent-attention models on meshes, and the configs they refuse.

Sharded over the 8 fake CPU devices, an MoE model gives the single-device logits (1e-5), whether
whole experts sit on each device (expert parallelism: 8 experts over model = 4) or each expert's
features are split (tensor parallelism: 6 experts do not divide 4, their 32 features do).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxeval.errors import JaxevalError
from jaxeval.models import load_model
from jaxeval.platform.mesh import batch_sharding, make_mesh
from tests.helpers.tiny_models import make_tiny_checkpoint
from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits


def _sharded_equals_single(models, tiny, family, **overrides):
    if len(jax.devices()) < 8:
        pytest.skip("needs the 8 fake CPU devices from tests/conftest.py")
    single, _ = models(family, **overrides)
    mesh = make_mesh("data_model")  # data 2, model 4
    sharded = load_model(tiny(family, **overrides), mesh=mesh)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, single.spec.vocab_size, (8, 16)).astype(np.int32)
    rows = full_rows(tokens)
    placed = [jax.device_put(x, batch_sharding(mesh, x.shape)) for x in (tokens, *rows)]
    expected = logits_fn(single.spec, single.params, tokens, *rows)
    actual = logits_fn(sharded.spec, sharded.params, *placed)
    assert_logits_close(actual, expected, f"{family} {overrides} on data_model")
    return sharded


def test_expert_parallel_equals_single_device(models, tiny):
    sharded = _sharded_equals_single(models, tiny, "qwen3_moe")
    gate = sharded.params["layers"]["moe"]["gate"]  # [L, X = 8, D, F]: whole experts per device
    assert tuple(gate.sharding.spec)[:2] == (None, "model"), gate.sharding.spec


def test_tensor_parallel_experts_equal_single_device(models, tiny):
    sharded = _sharded_equals_single(models, tiny, "qwen3_moe", num_experts=6)
    gate = sharded.params["layers"]["moe"]["gate"]  # 6 experts: their 32 features split 4 ways
    assert tuple(gate.sharding.spec) == (None, None, None, "model"), gate.sharding.spec


@pytest.mark.parametrize("family", ["deepseek_v3", "gpt_oss"])
def test_latent_attention_and_sinks_sharded(models, tiny, family):
    _sharded_equals_single(models, tiny, family)


def test_dense_first_layers_are_their_own_stack(models):
    loaded, _ = models("deepseek_v3")
    params = loaded.params
    assert params["dense_layers"]["mlp"]["gate"].shape[0] == 1  # first_k_dense_replace = 1
    assert params["layers"]["moe"]["gate"].shape[:2] == (1, 8)  # layer 1: 8 experts
    assert "mlp" not in params["layers"] and "moe" not in params["dense_layers"]


def test_qwen_dense_first_layer_matches_transformers(models):
    """Qwen-MoE's `mlp_only_layers` = [0]: a dense first layer, as DeepSeek's, equals HF."""
    loaded, torch_model = models("qwen3_moe", mlp_only_layers=[0])
    assert loaded.spec.dense_layers == 1
    tokens = np.random.default_rng(3).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
    assert_logits_close(ours, torch_logits(torch_model, tokens), "qwen3_moe dense layer 0")


@pytest.mark.parametrize(
    "family, overrides, message",
    [
        ("qwen3_moe", {"mlp_only_layers": [1]}, r"dense MLP layers \[1\]"),
        ("falcon", {"alibi": True}, "alibi"),
        ("olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
    ],
)
def test_unsupported_variants_are_named(tmp_path, family, overrides, message):
    path = make_tiny_checkpoint(family, str(tmp_path / family), **overrides)
    with pytest.raises(JaxevalError, match=message):
        load_model(path)


def test_expert_backends_score_alike(tiny):
    """`experts=ragged` and `experts=blocked` (`--model_args`) give the same log-likelihoods, and
    the run's model info names the backend that ran."""
    from jaxeval.api.instance import Instance
    from jaxeval.lm.jax_lm import JaxLM

    path = tiny("qwen3_moe")
    requests = [
        Instance("loglikelihood", {}, ("The quick brown fox", " jumps over"), 0),
        Instance("loglikelihood", {}, ("Water boils at", " 100 degrees"), 1),
    ]
    results = {}
    for experts in ("ragged", "blocked"):
        lm = JaxLM(
            pretrained=path, mesh="single", max_length=64, experts=experts, buckets=[(64, 4)]
        )
        assert lm.model_info()["experts"] == experts
        results[experts] = np.array([r[0] for r in lm.loglikelihood(requests, disable_tqdm=True)])
    np.testing.assert_allclose(results["ragged"], results["blocked"], atol=1e-5, rtol=0)
