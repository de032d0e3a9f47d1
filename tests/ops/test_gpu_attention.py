"""The `gpu` backend (`jaxeval.models.attention.GpuAttention`, its kernel
`jaxeval.ops.attention.gpu`) on the CPU: `dot_product_attention`'s XLA implementation under the
packed mask equals the reference.

- `packed` with `implementation="xla"` equals `attention.blocked_attend` and the dense
  `attention.attend` (under `packed_mask & window_mask`) on every query that sees a key: rows with
  several requests, a shared context with two children (the parent link), padding, a sliding
  window on positions, GQA 3:1 and 8:1, head dims 64 and 128; float32 within 2e-6, bfloat16
  within 2e-2;
- the cuDNN path's folded scale (queries times the scale, the call's scale 1.0) gives the same;
- cases that do not fit go to the reference, bit for bit, even when cuDNN is asked for;
- `fits`' rules table.

cuDNN itself needs an NVIDIA GPU: bench/device/gpu_run.py checks it there against the reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.models import attention as attn
from jaxeval.ops.attention import gpu as ga

SCALE = 0.125


def _rows(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two rows of T (>= 80) -> segment, parent, positions [2, T].

    Row 0: a request (seg 1, 20 tokens), a context (seg 2, 24) with two children (segs 3 and 4,
    parent 2, 9 and 6 tokens, positions continuing the context at 24), a request (seg 5, 12),
    then padding. Row 1: a request of 50, a request filling the rest.
    """
    seg, par, pos = (np.zeros((2, t), np.int32) for _ in range(3))

    def put(row, start, n, s, p=0, p0=0):
        seg[row, start : start + n] = s
        par[row, start : start + n] = p
        pos[row, start : start + n] = np.arange(p0, p0 + n)

    put(0, 0, 20, 1)
    put(0, 20, 24, 2)
    put(0, 44, 9, 3, 2, 24)
    put(0, 53, 6, 4, 2, 24)
    put(0, 59, 12, 5)
    put(1, 0, 50, 1)
    put(1, 50, t - 50, 2)
    return seg, par, pos


def _qkv(x: int, e: int, t: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = 2
    shapes = ((2, t, g * x, e), (2, t, g, e), (2, t, g, e))
    return tuple(jnp.asarray(rng.standard_normal(s).astype(np.float32), dtype) for s in shapes)


def _window(window):
    return None if window is None else jnp.int32(window)


def _dense(q, k, v, seg, par, pos, window, scale):
    allowed = attn.packed_mask(seg, par)
    if window is not None:
        allowed &= attn.window_mask(pos, pos, window)
    return attn.attend(q, k, v, allowed, scale=scale, softcap=None)


# jitted once for the module: a traced window (7, 16 or NO_WINDOW) reuses one compilation
XLA_GPU = attn.GpuAttention(implementation="xla")
FUSED = jax.jit(
    lambda q, k, v, seg, par, pos, window, scale: XLA_GPU.packed(
        q, k, v, attn.Mask(seg, par, pos, window), scale=scale, softcap=None, block=32, init=None
    )
)
BLOCKED = jax.jit(
    lambda q, k, v, seg, par, pos, window, scale: attn.blocked_attend(
        q, k, v, attn.Mask(seg, par, pos, window), scale=scale, softcap=None, block=32
    )
)
DENSE = jax.jit(_dense)
FOLDED = jax.jit(
    lambda q, k, v, seg, par, pos, window, scale: ga.fused_attend(
        q,
        k,
        v,
        ga.packed_allowed(attn.Mask(seg, par, pos, window)),
        scale,
        implementation="xla",
        fold_scale=True,
    )  # fmt: skip
)


def _tolerance(dtype) -> dict:
    return {"atol": 2e-6, "rtol": 2e-6} if dtype == jnp.float32 else {"atol": 2e-2, "rtol": 1e-2}


CASES = [  # x (query heads per kv head), e, window, dtype, references (blocked: compiles slowly)
    (3, 64, None, jnp.float32, (DENSE,)),
    (3, 64, 7, jnp.float32, (BLOCKED, DENSE)),
    (3, 64, attn.NO_WINDOW, jnp.float32, (BLOCKED, DENSE)),  # a windowed model's global layer
    (8, 128, 16, jnp.float32, (DENSE,)),
    (8, 128, None, jnp.float32, (DENSE,)),
    (3, 64, None, jnp.bfloat16, (DENSE,)),
    (8, 128, 7, jnp.bfloat16, (BLOCKED, DENSE)),
]


@pytest.mark.parametrize("x, e, window, dtype, references", CASES)
def test_xla_path_equals_the_reference(x, e, window, dtype, references):
    t = 96
    q, k, v = _qkv(x, e, t, dtype, seed=x * 1000 + e)
    args = (q, k, v, *_rows(t), _window(window), jnp.float32(SCALE))
    out = FUSED(*args)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert np.isfinite(np.asarray(out, np.float32)).all()
    read = args[3] != 0  # padding queries see nothing: their outputs are never read
    got = np.asarray(out, np.float32)[read]
    for reference in references:
        want = np.asarray(reference(*args), np.float32)[read]
        np.testing.assert_allclose(got, want, **_tolerance(dtype))


@pytest.mark.parametrize("x, e, dtype", [(3, 64, jnp.float32), (8, 128, jnp.bfloat16)])
def test_folded_scale_equals_the_scaled_scores(x, e, dtype):
    """cuDNN's form (q * scale, then a call with scale 1.0) through XLA, against the reference."""
    t = 96
    q, k, v = _qkv(x, e, t, dtype, seed=7)
    args = (q, k, v, *_rows(t), jnp.int32(11), jnp.float32(SCALE))
    read = args[3] != 0
    got = np.asarray(FOLDED(*args), np.float32)[read]
    np.testing.assert_allclose(got, np.asarray(DENSE(*args), np.float32)[read], **_tolerance(dtype))


def _program(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args))


def test_the_fused_path_is_one_dense_call_not_block_loops():
    """`packed` that fits traces to no loop; one that does not (a soft-cap) to the reference's."""
    q, k, v = _qkv(3, 64, 96, jnp.float32)
    seg, par, pos = _rows(96)

    def packed(softcap):
        return lambda q, k, v, *rows: XLA_GPU.packed(
            q, k, v, attn.Mask(*rows), scale=jnp.float32(SCALE), softcap=softcap, block=16,
            init=None,
        )  # fmt: skip

    assert "while" not in _program(packed(None), q, k, v, seg, par, pos)
    assert "while" in _program(packed(30.0), q, k, v, seg, par, pos)


@pytest.mark.parametrize(
    "dtype, softcap, with_init",
    [(jnp.float32, None, False), (jnp.bfloat16, 30.0, False), (jnp.bfloat16, None, True)],
)
def test_what_does_not_fit_is_the_reference_program(dtype, softcap, with_init):
    """Asked for cuDNN on this CPU: float32, a soft-cap or a cache state never reach it; `packed`
    traces to the very program of `attention.blocked_attend` (so its output is bit for bit)."""
    t, x, e = 64, 3, 64
    q, k, v = _qkv(x, e, t, dtype, seed=3)
    seg, par, pos = (a[:, :t] for a in _rows(96))
    init = attn.online_init((2, 2, x, t), e) if with_init else None
    kw = {"scale": jnp.float32(SCALE), "softcap": softcap, "block": 16, "init": init}
    window = jnp.int32(9)
    cudnn = attn.GpuAttention(implementation="cudnn")
    got = _program(
        lambda q, k, v, *rows: cudnn.packed(q, k, v, attn.Mask(*rows, window), **kw),
        q, k, v, seg, par, pos,
    )  # fmt: skip
    want = _program(
        lambda q, k, v, *rows: attn.blocked_attend(q, k, v, attn.Mask(*rows, window), **kw),
        q, k, v, seg, par, pos,
    )  # fmt: skip
    assert got == want and "while" in got


def _shaped(h, g, e, dtype, ev=None):
    q = jax.ShapeDtypeStruct((1, 8, h, e), dtype)
    k = jax.ShapeDtypeStruct((1, 8, g, e), dtype)
    v = jax.ShapeDtypeStruct((1, 8, g, e if ev is None else ev), dtype)
    return q, k, v


BF16, F16, F32 = jnp.bfloat16, jnp.float16, jnp.float32
INIT = object()  # any cache state


@pytest.mark.parametrize(
    "platform, h, g, e, dtype, softcap, init, ev, expected",
    [
        ("gpu", 32, 8, 64, BF16, None, None, None, True),  # Llama-3.2-1B
        ("gpu", 32, 8, 128, BF16, None, None, None, True),  # Llama-3-8B
        ("cuda", 9, 3, 64, F16, None, None, None, True),  # SmolLM2, float16
        ("gpu", 32, 8, 128, F32, None, None, None, False),  # float32: not cuDNN's
        ("gpu", 16, 8, 256, BF16, 50.0, None, None, False),  # Gemma-2's soft-cap
        ("gpu", 16, 8, 128, BF16, None, INIT, None, False),  # a prefill after its cache
        ("gpu", 16, 16, 192, BF16, None, None, 128, False),  # MLA: v's head dim differs
        ("gpu", 8, 2, 60, BF16, None, None, None, False),  # E not a multiple of 8
        ("gpu", 8, 2, 512, BF16, None, None, None, False),  # E over any cuDNN limit
        ("gpu", 6, 4, 64, BF16, None, None, None, False),  # H not a multiple of G
        ("cpu", 32, 8, 128, F32, None, None, None, True),  # XLA's path: any float dtype
        ("cpu", 9, 3, 60, BF16, None, None, None, True),  # and any head dim
        ("cpu", 9, 3, 64, F32, 30.0, None, None, False),  # but never a soft-cap
        ("tpu", 9, 3, 64, BF16, None, INIT, None, False),  # nor a cache state
    ],
)
def test_fits_rules(platform, h, g, e, dtype, softcap, init, ev, expected):
    q, k, v = _shaped(h, g, e, dtype, ev)
    assert ga.fits(q, k, softcap=softcap, init=init, platform=platform, v=v) is expected


def test_implementation_defaults_to_the_backend():
    assert ga.implementation_for("xla") == "xla"
    assert ga.implementation_for("cudnn") == "cudnn"
    expected = "cudnn" if jax.default_backend() == "gpu" else "xla"
    assert ga.implementation_for(None) == expected
