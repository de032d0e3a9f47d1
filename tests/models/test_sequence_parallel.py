"""Sequence parallelism (`jaxeval.models.attention.sequence`): a long row whose rows cannot split
over the 8 fake CPU devices splits its tokens instead, and gives the single-device numbers.

The zig-zag order and its inverse; when a call splits; each device's query blocks balance a causal
row; the kernels' held query blocks equal the whole row's (the reference and the Pallas kernel in
its interpreter); `hidden` (scoring) and `forward_new` (a long prefill after a cached prefix) on
three meshes equal one device within 1e-5 relative for a dense, a sliding-window, a latent-
attention and two Mixture-of-Experts families (one with attention sinks); the continuous engine's
greedy tokens after a 1,900-token prompt are the single device's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from jaxeval.models import attention as attn
from jaxeval.models import decoder, load_model, param_shardings
from jaxeval.models import runtime as runtime_module
from jaxeval.models.attention import reference, sequence
from jaxeval.models.attention.sequence import Split, sequence_split
from jaxeval.models.runtime import make_runtime
from jaxeval.ops.attention import tpu_packed as tp
from jaxeval.platform.mesh import MESH_AXES, make_mesh
from tests.helpers.tiny_models import tiny_checkpoint

T = 2048  # 2 x 8 chunks of 128 tokens: the smallest row that splits on 8 devices


@pytest.fixture
def eight():
    if len(jax.devices()) < 8:
        pytest.skip("needs the 8 fake CPU devices from tests/conftest.py")


def _abstract(data: int, fsdp: int, model: int) -> AbstractMesh:
    return AbstractMesh((data, fsdp, model), MESH_AXES)


def test_zigzag_order_and_inverse():
    """The docstring's drawing: 8 chunks over 4 devices in the order 0 7 | 1 6 | 2 5 | 3 4."""
    split = Split(mesh=None, ways=4, length=8 * 3, block=3)
    chunks = split.order().reshape(8, 3)[:, 0] // 3
    assert chunks.tolist() == [0, 7, 1, 6, 2, 5, 3, 4]
    x = jnp.arange(2 * 24 * 5).reshape(2, 24, 5)
    assert (split.restore(split.permute(x)) == x).all()
    y = jnp.arange(3 * 2 * 24).reshape(3, 2, 24, 1)  # [L, B, T, ...]: the layers' keys
    assert (split.restore(split.permute(y, axis=2), axis=2) == y).all()
    assert (split.permute(y, axis=2)[:, :, :, 0] == y[:, :, split.order(), 0]).all()


def test_when_a_call_splits():
    data8, fsdp2_model4 = _abstract(8, 1, 1), _abstract(1, 2, 4)
    split = sequence_split(data8, rows=1, length=T, block=512)
    assert (split.ways, split.chunk, split.block) == (8, 128, 128)
    assert sequence_split(data8, rows=3, length=32768, block=512).block == 512
    assert sequence_split(data8, rows=8, length=T, block=512) is None  # the rows split
    assert sequence_split(data8, rows=1, length=T, block=0) is None  # a dense (short) row
    assert sequence_split(data8, rows=1, length=1024, block=256) is None  # chunks of 64 tokens
    assert sequence_split(data8, rows=1, length=T + 16, block=512) is None  # 2n does not divide
    assert sequence_split(_abstract(1, 1, 8), rows=1, length=T, block=512) is None  # no batch axes
    assert sequence_split(None, rows=1, length=T, block=512) is None
    assert sequence_split(fsdp2_model4, rows=1, length=T, block=512).ways == 2


def test_query_blocks_balance_a_causal_row():
    """Every device holds 2 chunks and visits the same number of causal key blocks."""
    split = Split(mesh=None, ways=8, length=16 * 256, block=128)
    held = [np.asarray(split.query_blocks(jnp.int32(d))) for d in range(8)]
    assert sorted(np.concatenate(held).tolist()) == list(range(32))
    visits = {int((ids + 1).sum()) for ids in held}
    assert visits == {(32 * 33 // 2) // 8}
    # device order: device d's tokens are places [d * 512, (d + 1) * 512) of `order()`
    order = split.order().reshape(8, 4, 128)[:, :, 0] // 128
    assert all((order[d] == held[d]).all() for d in range(8))


def _mask(b: int, t: int, window=None) -> attn.Mask:
    """Row 0: a request, a shared context with two children (parent links), a request, padding;
    other rows: one request then padding."""
    seg, par, pos = (np.zeros((b, t), np.int32) for _ in range(3))
    at = 0
    for s, n, p, p0 in [(1, 300, 0, 0), (2, 200, 0, 0), (3, 150, 2, 200), (4, 90, 2, 200)]:
        seg[0, at : at + n], par[0, at : at + n] = s, p
        pos[0, at : at + n] = np.arange(p0, p0 + n)
        at += n
    seg[0, at : t - 64] = 5
    pos[0, at : t - 64] = np.arange(t - 64 - at)
    seg[1:, : t // 2] = 1
    pos[1:, : t // 2] = np.arange(t // 2)
    return attn.Mask(*map(jnp.asarray, (seg, par, pos)), window)


@pytest.mark.parametrize("window", [None, 300])
def test_held_query_blocks_equal_the_whole_row(window):
    """blocked_attend and the Pallas kernel with `q_blocks` give the whole row's rows for those
    blocks, from an earlier state too (`init`)."""
    b, t, h, g, e, block = 2, 1024, 4, 2, 64, 128
    rng = np.random.default_rng(3)
    q, k, v = (
        jnp.asarray(rng.normal(size=(b, t, n, e)), jnp.float32) for n in (h, g, g)
    )  # fmt: skip
    mask = _mask(b, t, None if window is None else jnp.int32(window))
    scale = jnp.float32(e**-0.5)
    ids = jnp.asarray([6, 1, 7, 0], jnp.int32)
    rows = (ids[:, None] * block + jnp.arange(block)).reshape(-1)
    init = reference.online_init((b, g, h // g, t), e)
    init = (init[0].at[...].set(0.5), init[1].at[...].set(2.0), init[2] + 0.25)
    held_init = tuple(a[:, :, :, rows] for a in init)
    real = np.asarray(mask.segment)[:, rows] != 0  # a padding query's output is nobody's

    def close(actual, expected):
        np.testing.assert_allclose(
            np.asarray(actual)[real], np.asarray(expected)[:, rows][real], rtol=1e-5, atol=1e-5
        )

    for start, held_start in [(None, None), (init, held_init)]:
        whole = reference.blocked_attend(
            q, k, v, mask, scale=scale, softcap=None, block=block, init=start
        )
        part = reference.blocked_attend(
            q[:, rows], k, v, mask, scale=scale, softcap=None, block=block, init=held_start,
            q_blocks=ids,
        )  # fmt: skip
        close(part, whole)
        kernel = tp.packed_attention(
            q[:, rows], k, v, mask, scale=scale, softcap=None, block=block, init=held_start,
            interpret=True, q_blocks=ids,
        )  # fmt: skip
        close(kernel, whole)


@functools.cache
def _model(family: str, root: str):
    return load_model(tiny_checkpoint(family, root=root, max_position_embeddings=4096))


def _row(spec, b: int = 1) -> tuple[np.ndarray, ...]:
    """One row of T tokens: two requests and a padding tail (tokens, positions, segment, parent)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, spec.vocab_size, (b, T)).astype(np.int32)
    segment = np.ones((b, T), np.int32)
    segment[:, T // 3 :] = 2
    segment[:, -100:] = 0
    positions = np.concatenate([np.arange(T // 3), np.arange(T - T // 3)])
    positions = np.tile(positions.astype(np.int32), (b, 1))
    return tokens, positions, segment, np.zeros((b, T), np.int32)


def _close(actual, expected, keep, what):
    actual, expected = np.asarray(actual)[keep], np.asarray(expected)[keep]
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


HIDDEN = [
    ("llama", "data", "xla"),
    ("mistral", "data_model", "tpu"),
    ("mixtral", "fsdp", "xla"),
    pytest.param("gpt_oss", "data_model", "xla", marks=pytest.mark.slow),
    pytest.param("deepseek_v2", "fsdp", "tpu", marks=pytest.mark.slow),
    pytest.param("qwen3_moe", "data", "tpu", marks=pytest.mark.slow),
    pytest.param("gemma2", "fsdp", "cpu", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("family, preset, attention", HIDDEN)
def test_long_row_hidden_equals_one_device(eight, tmp_path_factory, family, preset, attention):
    loaded = _model(family, str(tmp_path_factory.getbasetemp() / "sequence"))
    spec = loaded.spec
    row = _row(spec)
    want = jax.jit(lambda p, *a: spec.hidden(p, *a))(loaded.params, *row)
    mesh = make_mesh(preset)
    runtime = make_runtime(mesh, attention=attention)
    assert sequence_split(mesh, rows=1, length=T, block=512) is not None
    params = jax.device_put(loaded.params, param_shardings(spec, mesh))
    run = jax.jit(lambda p, *a: spec.hidden(p, *a, runtime=runtime))
    got = run(params, *row)
    _close(got, want, row[2] != 0, f"{family} on {preset} ({attention})")
    if preset == "data":  # weights replicated: every all-gather is a layer's keys or values
        assert "all-gather" in run.lower(params, *row).compile().as_text()


PREFILL = [
    ("llama", "data", "xla"),
    ("gpt_oss", "data_model", "tpu"),
    pytest.param("mistral", "fsdp", "xla", marks=pytest.mark.slow),
    pytest.param("mixtral", "data", "tpu", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("family, preset, attention", PREFILL)
def test_long_prefill_equals_one_device(eight, tmp_path_factory, family, preset, attention):
    """`forward_new` of one 2,048-token prompt (77 padded slots) after a 200-token cached prefix:
    its hidden states and every layer's keys and values."""
    loaded = _model(family, str(tmp_path_factory.getbasetemp() / "sequence"))
    spec = loaded.spec
    rng = np.random.default_rng(1)
    s = 200
    prefix = spec.init_cache(1, 256, "float32")
    head = rng.integers(0, spec.vocab_size, (1, s)).astype(np.int32)
    _, prefix = jax.jit(lambda p, c, *a: spec.forward_cached(p, c, *a))(
        loaded.params, prefix, head, np.arange(s, dtype=np.int32)[None], np.ones((1, s), bool), 0
    )
    tokens = rng.integers(0, spec.vocab_size, (1, T)).astype(np.int32)
    valid = np.ones((1, T), bool)
    valid[:, -77:] = False
    args = (tokens, (s + np.arange(T, dtype=np.int32))[None], valid, np.int32(s))
    want = jax.jit(lambda p, c, *a: decoder.forward_new(spec, p, c, *a))(
        loaded.params, prefix, *args
    )
    mesh = make_mesh(preset)
    runtime = make_runtime(mesh, attention=attention)
    params = jax.device_put(loaded.params, param_shardings(spec, mesh))
    prefix = jax.device_put(prefix, NamedSharding(mesh, PartitionSpec()))
    got = jax.jit(lambda p, c, *a: decoder.forward_new(spec, p, c, *a, runtime=runtime))(
        params, prefix, *args
    )
    for name, a, w, keep in zip(
        "hkv", got, want, [(slice(None), valid[0]), *[(slice(None), slice(None), valid[0])] * 2]
    ):
        _close(a, w, keep, f"{family} on {preset} ({attention}): {name}")


@pytest.mark.slow
def test_long_prompt_greedy_tokens_equal_one_device(eight, tmp_path_factory, monkeypatch):
    """The continuous engine on the data mesh: a 1,900-token prompt's prefill splits its tokens
    (counted), and the greedy tokens equal one device's."""
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator

    path = tiny_checkpoint(
        "llama", root=str(tmp_path_factory.getbasetemp() / "sequence"), max_position_embeddings=4096
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    rng = np.random.default_rng(4)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven"]
    prompt = " ".join(rng.choice(words, 460))
    n = len(tokenizer(prompt)["input_ids"])
    assert 1792 < n <= 2048, n
    requests = [(prompt, {"until": [], "max_gen_toks": 12, "do_sample": False})]
    splits = []

    def counted(mesh, **kw):
        out = sequence_split(mesh, **kw)
        splits.append(out)
        return out

    def tokens(mesh: str) -> list[list[int]]:
        gen = Generator(
            model=load_model(path, mesh=make_mesh(mesh)),
            tokenizer=tokenizer,
            max_length=4096,
            batch_size=8,
        )
        return gen.generate_tokens(requests)

    single = tokens("single")
    monkeypatch.setattr(runtime_module, "sequence_split", counted)  # `Runtime.prompt_split`
    assert sequence is not None
    assert tokens("data") == single
    assert any(s is not None and s.ways == 8 for s in splits)


@pytest.mark.slow
def test_long_requests_through_the_run_equal_one_device(eight, tmp_path_factory, monkeypatch):
    """`JaxLM` on the data mesh at max_length 4,096 and a 4,096-token budget: the last batches of
    the 4,096-token rows hold fewer rows than devices (their tokens split), and every
    loglikelihood, greedy flag and rolling total equals one device's (the invariance suite's
    bounds)."""
    from jaxeval.api.instance import Instance
    from jaxeval.lm.jax_lm import JaxLM

    path = tiny_checkpoint(
        "llama", root=str(tmp_path_factory.getbasetemp() / "sequence"), max_position_embeddings=4096
    )
    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven", "north"]
    texts = [" ".join(rng.choice(words, n)) for n in (900, 600, 1500)]
    ll_args = [(t, " stone cloud") for t in texts[:2]] + [(texts[2][:4000], " river")]
    results, splits = {}, []

    def counted(mesh, **kw):
        out = sequence_split(mesh, **kw)
        splits.append(out)
        return out

    monkeypatch.setattr(decoder, "sequence_split", counted)
    for mesh in ("single", "data"):
        lm = JaxLM(pretrained=path, dtype="float32", mesh=mesh, max_length=4096, token_budget=4096)
        if mesh == "data":
            grid = lm.scorer.buckets
            assert grid.multiple_at(4096) == 1  # a last batch may hold fewer rows than devices
        ll = lm.loglikelihood(
            [Instance("loglikelihood", {}, a, i) for i, a in enumerate(ll_args)], disable_tqdm=True
        )
        rolling = lm.loglikelihood_rolling(
            [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)],
            disable_tqdm=True,
        )
        results[mesh] = (
            np.array([x[0] for x in ll]),
            np.array([x[1] for x in ll]),
            np.array(rolling),
        )
    assert any(s is not None and s.length == 4096 for s in splits)
    (ll0, gr0, roll0), (ll, gr, roll) = results["single"], results["data"]
    np.testing.assert_allclose(ll, ll0, atol=1e-5, rtol=2e-7)
    np.testing.assert_array_equal(gr, gr0)
    np.testing.assert_allclose(roll, roll0, atol=1e-5, rtol=1e-6)
