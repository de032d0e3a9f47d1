"""Slot parallelism (`jaxeval.models.attention.slots`): an engine of fewer rows than the 8 fake
CPU devices splits each row's cache slots over them, and gives the single-device numbers.

When the slots split; the split cache's online-softmax state equals the whole cache's (the XLA,
CPU and TPU backends, the last in Pallas's interpreter; heads over `model` too); its writes (a
decode step, an admission after a shared prefix, prompts whose pieces go round the devices or
stay whole) equal the whole cache's bit for bit; the sizing keeps rows below the shard count
when the slots split; the continuous engine's greedy and sampled tokens with a shared prefix and
a prompt that splits its tokens equal one device's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxeval.kernels.continuous import AdmitBatch, _install
from jaxeval.lm.generate import sizing
from jaxeval.models import runtime as runtime_module
from jaxeval.models.attention import reference, slots
from jaxeval.models.attention.slots import slot_splits, slots_split
from jaxeval.models.contract import KVCache
from jaxeval.models.runtime import make_runtime
from jaxeval.platform.mesh import make_mesh
from tests.helpers.tiny_models import tiny_checkpoint

L, G, X, E = 2, 2, 2, 16


@pytest.fixture
def eight():
    if len(jax.devices()) < 8:
        pytest.skip("needs the 8 fake CPU devices from tests/conftest.py")


def test_when_the_slots_split(eight):
    data = make_mesh("data")
    assert slots_split(data, rows=1, slots=1024).local == 128
    assert slots_split(data, rows=3, slots=2048).ways == 8
    assert slots_split(data, rows=8, slots=1024) is None  # a row a device: the rows split
    assert slots_split(data, rows=1, slots=1000) is None  # not 8 whole lanes
    assert slots_split(make_mesh("single"), rows=1, slots=1024) is None
    assert slot_splits(8, 1, 1024) and slot_splits(8, 4, 2048)
    assert not slot_splits(8, 16, 2048) and not slot_splits(1, 1, 1024)


def _cache(b: int, c: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((L, b, G, E, c)).astype(np.float32)
    v = rng.standard_normal((L, b, G, c, E)).astype(np.float32)
    valid = rng.random((b, c)) > 0.1
    positions = np.tile(np.arange(c, dtype=np.int32), (b, 1))
    return k, v, valid, positions


@pytest.mark.parametrize(
    "preset, attention, window",
    [("data", "xla", None), ("data_model", "cpu", 300), ("fsdp", "tpu", None)],
)
def test_split_state_equals_the_whole_cache(eight, preset, attention, window):
    """Rows at slot 0 (nothing read), inside the first piece, mid-cache and at the end."""
    b, c = 5, 2048
    k, v, valid, positions = _cache(b, c)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((b, 1, G * X, E)).astype(np.float32)
    index = np.asarray([0, 77, 1100, 1500, c], np.int32)
    q_pos = index[:, None]
    kw = dict(window=None if window is None else jnp.int32(window), scale=jnp.float32(0.25))
    whole = KVCache(k=k, v=v, valid=valid, positions=positions)
    want = reference.cache_state(
        q, whole, jnp.int32(1), q_pos, index, softcap=None, block=128, **kw
    )
    mesh = make_mesh(preset)
    runtime = make_runtime(mesh, attention=attention)
    split = slots_split(mesh, rows=b, slots=c)
    assert split is not None and split.ways == mesh.size // mesh.shape["model"]
    k_s, v_s, flags = split.shardings(G)
    args = (jax.device_put(k, k_s), jax.device_put(v, v_s))
    got = jax.jit(
        lambda q, cache, qp, i: split.cache_state(
            runtime.attention, q, cache, jnp.int32(1), qp, i, softcap=None, **kw
        )
    )(q, KVCache(*args, valid, positions), q_pos, index)
    # row 0 saw no key: its running max stays the masked value (its sums are wiped by the first
    # real key the decoder folds in next, whatever they hold)
    np.testing.assert_array_equal(np.asarray(got[0])[0], np.asarray(want[0])[0])
    got, want = ([np.asarray(x)[1:] for x in state] for state in (got, want))
    for name, a, w in zip(("max", "total", "values"), got, want):
        scale = float(np.abs(w).max())
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6 * scale, err_msg=name)
    out = reference._Online.finish(tuple(got), jnp.float32)
    ref = reference._Online.finish(tuple(want), jnp.float32)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attention", ["xla", "tpu"])
def test_split_decode_write_equals_the_whole_cache(eight, attention):
    b, c = 3, 1024
    k, v, valid, positions = _cache(b, c)
    rng = np.random.default_rng(2)
    k_new = rng.standard_normal((L, b, 1, G, E)).astype(np.float32)
    v_new = rng.standard_normal((L, b, 1, G, E)).astype(np.float32)
    index = np.asarray([0, 513, c], np.int32)  # first slot, a middle piece, past the end
    want = reference.write_slots(
        KVCache(jnp.asarray(k), jnp.asarray(v), valid, positions), k_new, v_new, index
    )
    mesh = make_mesh("data")
    runtime = make_runtime(mesh, attention=attention)
    split = slots_split(mesh, rows=b, slots=c)
    k_s, v_s, _ = split.shardings(G)
    cache = KVCache(jax.device_put(k, k_s), jax.device_put(v, v_s), valid, positions)
    got = jax.jit(lambda *a: split.write_slots(runtime.attention, *a))(cache, k_new, v_new, index)
    for a, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(w))
    assert got[0].sharding.spec == k_s.spec


@pytest.mark.parametrize("width, start", [(96, 200), (100, 0), (1024, 0), (256, 900)])
def test_split_install_equals_the_whole_cache(eight, width, start):
    """Prompts of 96 and 1,024 tokens go round in 8 pieces (the last slots of the 256-token
    prompt at 900 past C dropped), 100 tokens stay whole; a 200-slot prefix fills slots [0, 200)."""
    b, c, u = 4, 1024, 2
    k, v, valid, positions = _cache(b, c)
    rng = np.random.default_rng(3)
    k_new = rng.standard_normal((L, u, width, G, E)).astype(np.float32)
    v_new = rng.standard_normal((L, u, width, G, E)).astype(np.float32)
    new_valid = rng.random((u, width)) > 0.2
    new_pos = (start + np.arange(width, dtype=np.int32))[None].repeat(u, 0)
    sp = 256 if start else 0
    pk, pv, pvalid, ppos = _cache(1, sp, seed=4)
    prefix = KVCache(k=pk, v=pv, valid=pvalid, positions=ppos)
    dst = np.asarray([2, 0, b], np.int32)  # the third entry is padding
    src = np.asarray([1, 0, 0], np.int32)
    settings = None
    batch = AdmitBatch(None, None, np.int32(start), dst, src, settings)
    cache = KVCache(*map(jnp.asarray, (k, v, valid, positions)))
    want = _install(cache, prefix, k_new, v_new, new_valid, new_pos, batch)
    mesh = make_mesh("data")
    split = slots_split(mesh, rows=b, slots=c)
    k_s, v_s, flags = split.shardings(G)
    placed = KVCache(
        k=jax.device_put(k, k_s), v=jax.device_put(v, v_s), valid=valid, positions=positions
    )
    got = jax.jit(
        lambda cache, prefix, kn, vn, nv, npos, st, d, s: _install(
            cache, prefix, kn, vn, nv, npos, AdmitBatch(None, None, st, d, s, None), split
        )
    )(placed, prefix, k_new, v_new, new_valid, new_pos, np.int32(start), dst, src)
    for name, a, w in zip(KVCache._fields, got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(w), err_msg=name)


class _Spec:
    """The few fields `sizing` reads: an 8B-like shape (32 layers, 8 kv heads of 128)."""

    vocab_size = 128256
    num_heads = 32
    cache_heads = 8
    cache_head_dim = 128
    compute_dtype = "bfloat16"

    def init_cache(self, b, c):
        return KVCache(
            k=jnp.zeros((32, b, 8, 128, c), jnp.bfloat16),
            v=jnp.zeros((32, b, 8, c, 128), jnp.bfloat16),
            valid=jnp.zeros((b, c), bool),
            positions=jnp.zeros((b, c), jnp.int32),
        )


def test_sizing_goes_below_a_row_a_shard_when_the_slots_split(monkeypatch):
    monkeypatch.setattr(sizing, "activation_bytes_per_token", lambda spec, slots: 4096.0)
    spec, free = _Spec(), 13 * (1 << 30)
    one_row = sizing.cache_row_bytes(spec, 131072)
    assert one_row > free  # 16 GiB: a row a chip cannot be
    fit = sizing.engine_rows(spec, free_bytes=free, shards=8, slots=131072, wanted=64)
    assert fit.rows in (1, 2, 4) and fit.total_bytes <= free
    assert fit.cache_bytes == fit.rows * -(-one_row // 8)
    kept = sizing.engine_rows(
        spec, free_bytes=free, shards=8, slots=131072, wanted=1, explicit=True
    )
    assert kept.rows == 1
    # slots that do not cut into 8 whole lanes: rows round up to the shards, and do not fit
    with pytest.raises(Exception, match="no engine|gen_batch_size"):
        sizing.engine_rows(spec, free_bytes=free, shards=8, slots=131072 + 64, wanted=64)


def _generate(path, tokenizer, requests, mesh: str, rows: int) -> list[list[int]]:
    from jaxeval.lm.generate.config import GenConfig
    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model

    gen = Generator(
        model=load_model(path, mesh=make_mesh(mesh)),
        tokenizer=tokenizer,
        max_length=4096,
        config=GenConfig(batch_size=rows, fit_rows=False, min_prefix=16),
    )
    return gen.generate_tokens(requests)


@pytest.mark.parametrize(
    "family, preset",
    [("llama", "data"), pytest.param("mixtral", "fsdp", marks=pytest.mark.slow)],
)
def test_engine_tokens_with_split_slots_equal_one_device(
    eight, tmp_path_factory, monkeypatch, family, preset
):
    """Two engine rows on 8 devices (gen_batch_size=2): a 1,900-token prompt (its prefill splits
    its tokens) and three sampled prompts after a shared 200-word prefix; every token equals one
    device's, and every engine call on the mesh split its slots."""
    from transformers import AutoTokenizer

    path = tiny_checkpoint(
        family, root=str(tmp_path_factory.getbasetemp() / "slots"), max_position_embeddings=4096
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    rng = np.random.default_rng(4)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven"]
    head = " ".join(rng.choice(words, 200))
    requests = [(" ".join(rng.choice(words, 460)), {"until": [], "max_gen_toks": 12})]
    for n in (30, 50, 70):
        text = head + " " + " ".join(rng.choice(words, n))
        requests.append(
            (text, {"until": [], "max_gen_toks": 16, "do_sample": True, "temperature": 0.8})
        )
    single = _generate(path, tokenizer, requests, "single", 2)
    splits = []

    def counted(mesh, **kw):
        out = slots_split(mesh, **kw)
        splits.append(out)
        return out

    monkeypatch.setattr(runtime_module, "slots_split", counted)  # `Runtime.slots_split`
    assert slots is not None
    assert _generate(path, tokenizer, requests, preset, 2) == single
    assert splits and all(s is not None and s.ways == 8 for s in splits)


def test_engine_state_lives_split(eight, tmp_path_factory):
    """The engine's state shardings: keys and values over the slots, flags whole."""
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.engine import ContinuousEngine
    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model

    path = tiny_checkpoint("llama", root=str(tmp_path_factory.getbasetemp() / "slots"))
    gen = Generator(
        model=load_model(path, mesh=make_mesh("data")),
        tokenizer=AutoTokenizer.from_pretrained(path),
        max_length=2048,
    )
    engine = ContinuousEngine(gen.engine_target, rows=1, slots=2048, n_new=16, sample=False)
    cache = engine.state_shardings.cache
    assert cache.k.spec == PartitionSpec(None, None, None, None, "data")
    assert cache.v.spec == PartitionSpec(None, None, None, "data", None)
    assert cache.valid.spec == PartitionSpec()
    state = engine.new_state()
    assert isinstance(state.cache.k.sharding, NamedSharding)
    assert state.cache.k.addressable_shards[0].data.shape[-1] == 256
