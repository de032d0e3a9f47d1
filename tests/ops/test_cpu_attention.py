"""The `cpu` attention backend (`jaxeval/ops/attention/cpu_attention.cc`) against the `xla` reference.

- one-token steps (the backend's cache state, then the step's own key) give the same output with
  the kernel (backend `cpu`) as with XLA's loop (`xla`) within float32 tolerance, over head groupings (M = 1..5 query heads per
  kv head: one, two and three register groups), head sizes that are and are not multiples of 16,
  slot counts that are not multiples of 8, per-row bounds of 0, some and all slots, invalid slots,
  sliding windows and soft caps;
- a generation run (continuous batching, greedy and sampled; llama and gemma2, whose windows and
  soft caps go through the kernel) gives identical tokens with and without the kernel;
- the choice (`select_attention`): `auto` takes `cpu` on a one-device CPU mesh only, the setting
  beats `JAXEVAL_ATTENTION`, which beats the older `JAXEVAL_CPU_ATTENTION`; a bad value is a clear
  error; the backend is a field of the static runtime, so both programs come from one process with
  no cache cleared.

Skipped (not failed) only where no C++ compiler exists: `auto` then falls back to XLA by design.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models import attention
from jaxeval.models.attention import CPU, XLA, select_attention
from jaxeval.models.attention.choice import CPU_ENV
from jaxeval.models.contract import KVCache
from jaxeval.models.runtime import Runtime
from jaxeval.ops.attention import cpu as cpu_attention

BACKENDS = {"on": CPU, "off": XLA}

pytestmark = pytest.mark.skipif(cpu_attention.compiler() is None, reason="no C++ compiler")


def _cached(
    backend, q, kc, vc, layer, valid, spos, q_pos, index, kn, vn, *, window, scale, softcap
):
    """A cached call's attention as the decoder composes it: the backend's state over the cache,
    then the call's own keys (densely)."""
    cache = KVCache(k=kc, v=vc, valid=valid, positions=spos)
    state = backend.cache_state(
        q, cache, layer, q_pos, index, window=window, scale=scale, softcap=softcap
    )
    kn, vn, own = attention.new_keys(q, kn, vn, cache, q_pos, index, window=window)
    return attention.attend_new_keys(q, kn, vn, own, state, scale=scale, softcap=softcap)


def _attend(mode, q, kc, vc, layer, valid, spos, index, kn, vn, **kw):
    backend = BACKENDS[mode]
    if mode == "off":
        backend = dataclasses.replace(backend, cache_block=16)
    fn = jax.jit(lambda *a: _cached(backend, *a, scale=jnp.float32(0.3), **kw))
    return np.asarray(fn(q, kc, vc, layer, valid, spos, index[:, None], index, kn, vn))


@pytest.mark.parametrize(
    "x, e, c, window, softcap",
    [
        (3, 64, 300, None, None),  # SmolLM2's grouping and head size
        (1, 16, 37, None, None),
        (2, 24, 45, 20, None),  # head size not a multiple of 16, a sliding window
        (3, 12, 50, None, None),  # nor of 8: the scores' and the values' scalar remainders
        (4, 16, 64, None, 30.0),  # two register groups (3 + 1), Gemma-2's soft cap
        (5, 32, 131, 50, 20.0),
    ],
)
def test_kernel_equals_xla_loop(x, e, c, window, softcap):
    rng = np.random.default_rng(x * 1000 + e + c)
    layers, rows, g = 3, 5, 2
    q = rng.standard_normal((rows, 1, g * x, e)).astype(np.float32)
    kc = rng.standard_normal((layers, rows, g, e, c)).astype(np.float32)
    vc = rng.standard_normal((layers, rows, g, c, e)).astype(np.float32)
    kn = rng.standard_normal((rows, 1, g, e)).astype(np.float32)
    vn = rng.standard_normal((rows, 1, g, e)).astype(np.float32)
    index = np.array([0, 1, c // 2, c - 3, c - 1], np.int32)  # row 0 sees only its own key
    valid = rng.random((rows, c)) > 0.25
    valid[np.arange(rows), index] = True  # each step's own key is real
    spos = np.broadcast_to(np.arange(c, dtype=np.int32), (rows, c)).copy()
    args = (q, kc, vc, jnp.int32(layers - 1), valid, spos, index, kn, vn)
    kw = {"window": None if window is None else jnp.int32(window), "softcap": softcap}
    fused = _attend("on", *args, **kw)
    loop = _attend("off", *args, **kw)
    assert fused.shape == loop.shape == (rows, 1, g * x, e)
    np.testing.assert_allclose(fused, loop, atol=1e-5, rtol=1e-5)


def _packed_row(rng, t):
    """One packed row: requests, a context with two children, then padding (segment 0)."""
    seg, par, pos = np.zeros(t, np.int32), np.zeros(t, np.int32), np.zeros(t, np.int32)
    at, sid = 0, 1
    while at < t - 8:
        n = int(rng.integers(5, 60))
        n = min(n, t - 8 - at)
        seg[at : at + n], pos[at : at + n] = sid, np.arange(n)
        if rng.random() < 0.5 and at + n + 8 <= t - 8:  # two children continuing the context
            for child in (1, 2):
                m = int(rng.integers(1, 5))
                seg[at + n : at + n + m], par[at + n : at + n + m] = sid + child, sid
                pos[at + n : at + n + m] = n + np.arange(m)
                n += m
            sid += 2
        at, sid = at + n, sid + 1
    return seg, par, pos


@pytest.mark.parametrize(
    "t, x, e, block, window, softcap, with_init",
    [
        (300, 3, 64, 64, None, None, False),  # SmolLM2's grouping and head size
        (129, 1, 24, 32, 40, None, True),  # T and E not multiples of 16, a window, a cache state
        (70, 3, 12, 32, None, None, False),  # E not a multiple of 8: scalar remainders
        (96, 4, 16, 32, None, 30.0, True),  # Gemma-2's soft cap; 64 rows a task: score groups 6 + 4
        (200, 5, 32, 64, 17, 20.0, False),  # 5 heads: 80 rows a task, score groups 6 + 2
    ],
)
def test_packed_kernel_equals_xla_blocks(t, x, e, block, window, softcap, with_init):
    """`blocked_attend` (scoring's packed rows, a prefill's own keys after its cache): the fused
    kernel gives XLA's block loop within float32 tolerance on every query that sees a key."""
    rng = np.random.default_rng(t * 100 + x * 10 + e)
    b, g = 2, 2
    q = rng.standard_normal((b, t, g * x, e)).astype(np.float32)
    k = rng.standard_normal((b, t, g, e)).astype(np.float32)
    v = rng.standard_normal((b, t, g, e)).astype(np.float32)
    rows = [_packed_row(rng, t) for _ in range(b)]
    seg, par, pos = (np.stack(a) for a in zip(*rows))
    init = None
    if with_init:  # a cache's state: some queries saw keys, some (padding) nothing
        shape = (b, g, x, t)
        seen = rng.random(shape) > 0.3
        m0 = np.where(seen, rng.standard_normal(shape), attention.MASKED).astype(np.float32)
        total0 = np.where(seen, rng.random(shape) * 5 + 0.5, 0).astype(np.float32)
        acc0 = (rng.standard_normal((*shape, e)) * total0[..., None]).astype(np.float32)
        init = (m0, total0, acc0)
    kw = {"window": None if window is None else jnp.int32(window), "softcap": softcap}

    def run(mode):
        packed = BACKENDS[mode].packed
        fn = jax.jit(
            lambda q, k, v, *rows: packed(
                q,
                k,
                v,
                attention.Mask(*rows, kw["window"]),
                scale=jnp.float32(0.2),
                softcap=kw["softcap"],
                block=block,
                init=init,
            )  # fmt: skip
        )
        program = fn.lower(q, k, v, seg, par, pos).as_text()
        assert (cpu_attention.PACKED_TARGET in program) == (mode == "on")
        return np.asarray(fn(q, k, v, seg, par, pos))

    fused, loop = run("on"), run("off")
    assert fused.shape == loop.shape == (b, t, g * x, e)
    read = seg != 0  # padding queries see nothing: their outputs are never read
    np.testing.assert_allclose(fused[read], loop[read], atol=1e-5, rtol=1e-5)
    assert np.isfinite(fused).all()


def test_kernel_is_in_the_program_only_with_the_cpu_backend():
    """`cpu` puts the custom call in the decode step's program, `xla` does not; one process, no
    cache cleared between the two (the backend is a static argument, not a trace-time switch)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 1, 3, 8)).astype(np.float32)
    kc = rng.standard_normal((1, 2, 1, 8, 16)).astype(np.float32)
    vc = rng.standard_normal((1, 2, 1, 16, 8)).astype(np.float32)
    args = (q, kc, vc, jnp.int32(0), np.ones((2, 16), bool), np.zeros((2, 16), np.int32))
    index = np.array([4, 9], np.int32)
    new = q[:, :, :1]

    def attend(backend, *a):
        return _cached(backend, *a, window=None, scale=jnp.float32(1.0), softcap=None)

    step = jax.jit(attend, static_argnums=0)

    def program(backend):
        return step.lower(backend, *args, index[:, None], index, new, new).as_text()

    assert cpu_attention.TARGET in program(CPU)
    assert cpu_attention.TARGET not in program(XLA)
    assert cpu_attention.TARGET in program(CPU)  # and back: nothing stale was reused


def test_runtime_backend_is_in_the_jit_key():
    """Two runtimes differing only in their backend compile two programs: scoring's packed rows go
    through the custom call with `cpu`, through XLA's blocks with `xla`."""
    from transformers import AutoConfig

    from jaxeval.models.families import spec_from_config
    from tests.helpers.tiny_models import tiny_checkpoint

    spec = spec_from_config(AutoConfig.from_pretrained(tiny_checkpoint("llama")))
    params = spec.abstract_params()
    rows = jax.ShapeDtypeStruct((1, 256), np.int32)
    hidden = jax.jit(lambda rt, p, t: spec.hidden(p, t, t, t, t, runtime=rt), static_argnums=0)
    on = hidden.lower(Runtime(attention=CPU), params, rows).as_text()
    off = hidden.lower(Runtime(attention=XLA), params, rows).as_text()
    assert cpu_attention.PACKED_TARGET in on and cpu_attention.PACKED_TARGET not in off


def test_select_attention_rules(monkeypatch):
    for name in ("JAXEVAL_ATTENTION", CPU_ENV):
        monkeypatch.delenv(name, raising=False)
    one = Mesh(np.array(jax.devices()[:1]), ("data",))
    assert len(jax.devices()) > 1  # the suite's 8 host devices
    many = Mesh(np.array(jax.devices()), ("data",))
    assert select_attention(one) is CPU  # auto: one CPU device
    assert select_attention(many) is XLA  # a sharded step would gather the kernel's operands
    assert select_attention(one, "xla") is XLA
    assert select_attention(many, "cpu") is CPU  # asked for: XLA gathers, results the same
    monkeypatch.setenv(CPU_ENV, "off")  # the older switch
    assert select_attention(one) is XLA
    monkeypatch.setenv("JAXEVAL_ATTENTION", "cpu")  # the newer one wins
    assert select_attention(one) is CPU
    assert select_attention(one, "xla") is XLA  # and the argument beats both


def test_bad_setting_is_a_clear_error(monkeypatch):
    one = Mesh(np.array(jax.devices()[:1]), ("data",))
    with pytest.raises(JaxevalError, match="attention='fast' is not one of auto, xla, cpu"):
        select_attention(one, "fast")
    monkeypatch.delenv("JAXEVAL_ATTENTION", raising=False)
    monkeypatch.setenv(CPU_ENV, "fast")
    with pytest.raises(JaxevalError, match="JAXEVAL_CPU_ATTENTION='fast'"):
        select_attention(one)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
@pytest.mark.slow
def test_generation_tokens_identical_with_kernel(family):
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model
    from tests.helpers.tiny_models import tiny_checkpoint

    path = tiny_checkpoint(family)
    model, tok = load_model(path), AutoTokenizer.from_pretrained(path)
    sampled = {"do_sample": True, "temperature": 1.3, "top_k": 40}
    requests = [
        (p, {"max_gen_toks": n, **extra})
        for (p, n), extra in zip(
            [("Hello there", 12), ("A B C D E F G", 3), ("One two three four", 9), ("x y", 14)],
            [{}, {}, sampled, sampled],
        )
    ]

    def tokens(mode):
        runtime = dataclasses.replace(model.runtime, attention=BACKENDS[mode])
        loaded = dataclasses.replace(model, runtime=runtime)
        gen = Generator(model=loaded, tokenizer=tok, max_length=128, batch_size=2, refill_rows=1)
        return gen.generate_tokens(requests)

    on = tokens("on")
    assert on == tokens("off")
    assert any(len(t) > 1 for t in on)
