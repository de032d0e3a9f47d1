"""On the 8-device fake CPU mesh, sharded params give the single-device logits (1e-5)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxeval.models import load_model
from jaxeval.platform.mesh import batch_sharding, make_mesh
from tests.models.common import assert_logits_close, full_rows, logits_fn


@pytest.mark.parametrize(
    "family, preset", [("llama", "data_model"), ("gemma2", "data_model"), ("gpt_neox", "fsdp")]
)
def test_sharded_logits_equal_single_device(models, tiny, family, preset):
    if len(jax.devices()) < 8:
        pytest.skip("needs the 8 fake CPU devices from tests/conftest.py")
    single, _ = models(family)
    mesh = make_mesh(preset)
    sharded = load_model(tiny(family), mesh=mesh)
    q = sharded.params["layers"]["attn"]["q"]
    assert q.sharding.mesh == mesh
    axes = {
        a for part in q.sharding.spec if part for a in ((part,) if isinstance(part, str) else part)
    }
    assert axes == ({"model"} if preset == "data_model" else {"fsdp"}), q.sharding.spec
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, single.spec.vocab_size, (8, 16)).astype(np.int32)
    rows = full_rows(tokens)
    placed = [jax.device_put(x, batch_sharding(mesh, x.shape)) for x in (tokens, *rows)]
    expected = logits_fn(single.spec, single.params, tokens, *rows)
    actual = logits_fn(sharded.spec, sharded.params, *placed)
    assert_logits_close(actual, expected, f"{family} on {preset}")


def test_indivisible_dimensions_fall_back_to_replicated(models, tiny):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    mesh = make_mesh("data_model")  # model = 4; the tiny models have 2 kv heads
    loaded = load_model(tiny("llama"), mesh=mesh)
    k = loaded.params["layers"]["attn"]["k"]
    assert all(part is None for part in k.sharding.spec)
    assert loaded.params["embed"].sharding.spec[0] == "model"  # 512 rows split 4 ways


@pytest.mark.slow
def test_sharded_cached_decoding_equals_single_device(models):
    """forward_cached with params, cache and batch sharded on data x model gives the same logits."""
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    from jaxeval.models import cache_shardings, param_shardings
    from tests.models.common import cached_step

    loaded, _ = models("gemma2")
    spec = loaded.spec
    mesh = make_mesh("data_model", model=2)  # 2 kv heads split over model = 2
    params = jax.device_put(loaded.params, param_shardings(spec, mesh))
    cache_sh = cache_shardings(spec, mesh, 4, 16)
    assert cache_sh.k.spec == jax.sharding.PartitionSpec(None, "data", "model", None, None)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, spec.vocab_size, (4, 12)).astype(np.int32)
    valid = np.ones((4, 12), bool)
    valid[1, :5] = False
    positions = np.clip(np.cumsum(valid, axis=1) - 1, 0, None).astype(np.int32)
    expected, _ = cached_step(
        spec,
        loaded.params,
        spec.init_cache(4, 16, "float32"),
        tokens,
        positions,
        valid,
        np.int32(0),
    )
    cache = jax.device_put(spec.init_cache(4, 16, "float32"), cache_sh)
    placed = [jax.device_put(x, batch_sharding(mesh, x.shape)) for x in (tokens, positions, valid)]
    actual, cache = cached_step(spec, params, cache, *placed, np.int32(0))
    assert_logits_close(actual, expected, "sharded prefill")


def test_fsdp_decode_keeps_weights_on_their_shards_and_equals_single_device(models, tiny):
    """On an fsdp mesh a decode step of few tokens leaves each layer's weights on their shards
    (`decoder.weights_stay`: no weight all-gather in the compiled step) and a prefill of many
    tokens gathers them; both give the single device's logits, step after step."""
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    from jaxeval.models import cache_shardings
    from jaxeval.models.decoder import weights_stay
    from tests.models.common import cached_step

    single, _ = models("llama")
    mesh = make_mesh("fsdp")
    sharded = load_model(tiny("llama"), mesh=mesh)
    spec, runtime = sharded.spec, sharded.runtime
    b, p, c = 8, 24, 32
    assert weights_stay(spec, runtime, b) and not weights_stay(spec, runtime, b * p)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, spec.vocab_size, (b, p)).astype(np.int32)
    valid = np.ones((b, p), bool)
    valid[2, :7] = False
    positions = np.clip(np.cumsum(valid, axis=1) - 1, 0, None).astype(np.int32)
    ref_cache = single.spec.init_cache(b, c, "float32")
    cache = jax.device_put(spec.init_cache(b, c, "float32"), cache_shardings(spec, mesh, b, c))
    expected, ref_cache = cached_step(
        single.spec, single.params, ref_cache, tokens, positions, valid, np.int32(0)
    )
    placed = [jax.device_put(x, batch_sharding(mesh, x.shape)) for x in (tokens, positions, valid)]
    actual, cache = cached_step(spec, sharded.params, cache, *placed, np.int32(0), runtime=runtime)
    assert_logits_close(actual, expected, "fsdp prefill")
    index = np.full((b,), p, np.int32)
    index[5] = p - 3  # rows at their own slots, as the continuous engine feeds them
    last = positions[:, -1].copy()
    for step in range(3):
        nxt = np.asarray(expected).argmax(-1).astype(np.int32)[:, None]
        last = last + 1
        args = (nxt, last[:, None], np.ones((b, 1), bool), index)
        expected, ref_cache = cached_step(single.spec, single.params, ref_cache, *args)
        if step == 0:
            lowered = cached_step.lower(spec, sharded.params, cache, *args, runtime=runtime)
            hlo = lowered.compile().as_text()
            weights = (
                {  # a layer's slice of each stacked weight, and the embedding
                    ",".join(map(str, w.shape[1:]))
                    for w in jax.tree.leaves(sharded.params["layers"])
                    if w.ndim > 2
                }
                | {",".join(map(str, sharded.params["embed"].shape))}
            )
            gathered = [
                line.strip()[:120]
                for line in hlo.splitlines()
                if " all-gather(" in line and any(f"= f32[{w}]" in line for w in weights)
            ]
            assert not gathered, gathered
        actual, cache = cached_step(spec, sharded.params, cache, *args, runtime=runtime)
        assert_logits_close(actual, expected, f"fsdp decode step {step}")
        index = index + 1
