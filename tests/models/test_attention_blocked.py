"""Blocked (flash-style) attention equals the dense path; it skips masked blocks and stays small.

`blocked_attend` equals `attend` under `packed_mask & window_mask` (packed rows with shared-context
children, sliding windows, soft-capping, GQA; 1e-6 relative); `cache_attend` equals `attend` under
`cache_mask & window_mask` for prefill and decode and never reads past slot index + T's block;
`spec.hidden(attention_block=Q)` equals the dense body on tiny real families (1e-5, the parity
metric); at T = 4096 the blocked body's temporaries are a small fraction of the dense one's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.models import attention as attn
from jaxeval.models.contract import KVCache
from jaxeval.models.spec import ModelSpec


def _close(actual, expected, rtol: float = 1e-6):
    """|a - e| <= rtol * |e| + rtol * max|e|, elementwise (the model tests' metric, tighter)."""
    expected = np.asarray(expected)
    atol = rtol * float(np.abs(expected).max())
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def _cache_layout(k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[L, B, C, G, E] keys and values -> the KV cache's layouts: k [L, B, G, E, C], v [L, B, G, C, E]."""
    return k.transpose(0, 1, 3, 4, 2), v.transpose(0, 1, 3, 2, 4)


def _packed_rows(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three rows of length T (>= 90) -> segment, parent, positions [3, T].

    Row 0: a request (seg 1, 20 tokens), a shared context (seg 2, 25) with three children (segs
    3, 4, 5 of 7, 4, 9 tokens, positions continuing the context), a request (seg 6), padding.
    Row 1: one request filling the row. Row 2: two requests, then padding.
    """
    seg, par, pos = (np.zeros((3, t), np.int32) for _ in range(3))

    def put(row, start, n, s, p=0, p0=0):
        seg[row, start : start + n] = s
        par[row, start : start + n] = p
        pos[row, start : start + n] = np.arange(p0, p0 + n)

    put(0, 0, 20, 1)
    put(0, 20, 25, 2)
    put(0, 45, 7, 3, 2, 25)
    put(0, 52, 4, 4, 2, 25)
    put(0, 56, 9, 5, 2, 25)
    put(0, 65, t - 75, 6)
    put(1, 0, t, 1)
    put(2, 0, 33, 1)
    put(2, 33, 40, 2)
    return seg, par, pos


def _qkv(rng, b, t, h, g, e, s=None):
    s = t if s is None else s
    q = rng.normal(size=(b, t, h, e)).astype(np.float32)
    k = rng.normal(size=(b, s, g, e)).astype(np.float32)
    v = rng.normal(size=(b, s, g, e)).astype(np.float32)
    return jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)


CASES = [  # (heads, kv heads, window, softcap, block)
    (4, 4, None, None, 16),  # plain multi-head
    (4, 2, None, None, 8),  # GQA, many blocks
    (6, 2, 12, None, 16),  # Mistral-style sliding window, GQA
    (4, 2, 8, 5.0, 16),  # Gemma-2 style: window and soft-capping
    (4, 1, None, 5.0, 32),  # multi-query, soft-capping
    (4, 2, 6, None, 24),  # T not a multiple of the block: padded row
]


@pytest.mark.parametrize("heads,kv_heads,window,softcap,block", CASES)
def test_blocked_equals_dense(heads, kv_heads, window, softcap, block):
    t = 96
    rng = np.random.default_rng(heads * 100 + block)
    seg, par, pos = _packed_rows(t)
    q, k, v = _qkv(rng, 3, t, heads, kv_heads, 8)
    scale = jnp.float32(0.37)
    allowed = attn.packed_mask(seg, par)
    if window is not None:
        allowed = allowed & attn.window_mask(pos, pos, window)
    dense = attn.attend(q, k, v, allowed, scale=scale, softcap=softcap)
    w = None if window is None else jnp.int32(window)
    blocked = jax.jit(
        lambda q, k, v: attn.blocked_attend(
            q, k, v, attn.Mask(seg, par, pos, w), scale=scale, softcap=softcap, block=block
        )
    )(q, k, v)
    assert blocked.shape == dense.shape == (3, t, heads, 8)
    real = seg != 0  # padding queries see nothing; their outputs are never read
    _close(np.asarray(blocked)[real], np.asarray(dense)[real])
    assert np.isfinite(np.asarray(blocked)).all()


def test_block_visibility_golden():
    """`Mask`'s docstring's example (`jaxeval.ops.attention.mask`): rows of 8 tokens in blocks of 2."""
    seg = np.array([[1, 1, 1, 2, 2, 3, 3, 4]], np.int32)
    par = np.array([[0, 0, 0, 0, 0, 0, 0, 3]], np.int32)
    pos = np.array([[0, 1, 2, 0, 1, 0, 1, 2]], np.int32)
    flags = np.asarray(attn.block_visibility(attn.Mask(seg, par, pos), block=2))
    assert flags.astype(int).tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1],
    ]
    # One request with a window of 3 positions: two block diagonals.
    one = np.ones((1, 8), np.int32)
    flags = attn.block_visibility(
        attn.Mask(one, 0 * one, np.arange(8)[None], jnp.int32(3)), block=2
    )
    assert np.asarray(flags).astype(int).tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1],
    ]


@pytest.mark.parametrize("window", [None, 10, 40])
def test_block_visibility_is_conservative(window):
    """A skipped block pair has no visible (query, key) pair in any row; and some are skipped."""
    t, block = 96, 8
    seg, par, pos = _packed_rows(t)
    allowed = np.asarray(attn.packed_mask(seg, par))
    if window is not None:
        allowed = allowed & np.asarray(attn.window_mask(pos, pos, window))
    n = t // block
    pairs = allowed.reshape(3, n, block, n, block).transpose(1, 3, 0, 2, 4).reshape(n, n, -1)
    w = None if window is None else jnp.int32(window)
    flags = np.asarray(attn.block_visibility(attn.Mask(seg, par, pos, w), block=block))
    assert flags[pairs.any(-1)].all()
    # Without row 1 (one request filling the row), blocks below the diagonal are skipped.
    flags = np.asarray(
        attn.block_visibility(attn.Mask(seg[[0, 2]], par[[0, 2]], pos[[0, 2]], w), block=block)
    )
    assert not flags[np.tril(np.ones((n, n), bool))].all()


@pytest.mark.parametrize(
    "t,index,window,new_block",
    [
        (1, 37, None, 0),
        (1, 70, 9, 0),
        (12, 0, None, 0),
        (5, 20, 4, 0),
        (40, 0, None, 16),  # a long prefill: its own keys block by block (T not a multiple)
        (36, 20, None, 12),  # a suffix after a cached prefix, blocked, from the cache's state
        (36, 20, 7, 12),
    ],
)
@pytest.mark.slow
def test_cache_attend_equals_dense(t, index, window, new_block):
    """Prefill (T > 1 at index 0), decode (T = 1), a suffix after cached slots; C = 80 is not a
    multiple of the cache block 32; `new_block` > 0 attends over the call's own keys blocked."""
    b, c, heads, kv_heads, e, layers, block = 2, 80, 4, 2, 8, 3, 32
    rng = np.random.default_rng(t + index)
    q, _, _ = _qkv(rng, b, t, heads, kv_heads, e)
    k_all = rng.normal(size=(layers, b, c, kv_heads, e)).astype(np.float32)
    v_all = rng.normal(size=(layers, b, c, kv_heads, e)).astype(np.float32)
    valid = np.zeros((b, c), bool)
    valid[0, 3 : index + t] = True  # row 0 left-padded by 3
    valid[1, : index + t] = True
    slot_pos = np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)
    q_pos = slot_pos[:, index : index + t]
    layer = 1
    allowed = attn.cache_mask(valid, jnp.int32(index), t)
    if window is not None:
        allowed = allowed & attn.window_mask(q_pos, slot_pos, window)
    # np.asarray waits for the result: JAX may alias these numpy buffers on the CPU and compute
    # asynchronously, and they are overwritten with garbage below.
    dense = np.asarray(
        attn.attend(q, k_all[layer], v_all[layer], allowed, scale=jnp.float32(0.3), softcap=3.0)
    )
    # This call's own keys/values come as arguments; the cache holds only the slots before
    # `index`. Its slots from `index` to the end of the last visited block hold garbage (read,
    # masked), and past that NaN: neither may reach the output.
    k_new, v_new = (
        k_all[layer, :, index : index + t].copy(),
        v_all[layer, :, index : index + t].copy(),
    )
    last = max(block, -(-index // block) * block)
    k_all[:, :, index:last] = 1e4
    v_all[:, :, index:last] = 1e4
    k_all[:, :, last:] = np.nan
    v_all[:, :, last:] = np.nan
    w = None if window is None else jnp.int32(window)
    blocked = jax.jit(
        lambda q, k_all, v_all, index: attn.cache_attend(
            q,
            KVCache(k=k_all, v=v_all, valid=valid, positions=slot_pos),
            jnp.int32(layer),
            q_pos,
            index,
            k_new,
            v_new,
            window=w,
            scale=jnp.float32(0.3),
            softcap=3.0,
            block=block,
            new_block=new_block,
        )
    )(q, *_cache_layout(k_all, v_all), jnp.int32(index))
    real = np.asarray(valid[:, index : index + t])
    _close(np.asarray(blocked)[real], np.asarray(dense)[real])
    assert np.isfinite(np.asarray(blocked)).all()


@pytest.mark.parametrize("family", ["gemma2", "qwen3", "gpt2"])
@pytest.mark.slow
def test_hidden_blocked_equals_dense_on_tiny_models(models, family):
    """The whole body: packed rows with shared-context children, blocked (Q = 16) vs dense."""
    loaded, _ = models(family)
    spec, params = loaded.spec, loaded.params
    t = 96
    seg, par, pos = _packed_rows(t)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, spec.vocab_size, (3, t)).astype(np.int32)
    run = jax.jit(spec.hidden, static_argnames="attention_block")
    dense = run(params, tokens, pos, seg, par, attention_block=0)
    blocked = run(params, tokens, pos, seg, par, attention_block=16)
    real = seg != 0
    _close(np.asarray(blocked)[real], np.asarray(dense)[real], rtol=1e-5)


def _tiny_spec(layers: int = 2) -> ModelSpec:
    return ModelSpec(
        model_type="llama",
        vocab_size=64,
        hidden_size=64,
        num_layers=layers,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=64,
        max_position_embeddings=8192,
        norm="rms",
        norm_eps=1e-6,
        mlp="gated",
        activation="silu",
        sliding_window=(0,) * layers,
        attn_scale=(0.25,) * layers,
        tie_embeddings=True,
    )


def _temp_bytes(spec: ModelSpec, t: int, block: int) -> int:
    ints = jax.ShapeDtypeStruct((1, t), jnp.int32)
    compiled = (
        jax.jit(spec.hidden, static_argnames="attention_block")
        .lower(spec.abstract_params(), ints, ints, ints, ints, attention_block=block)
        .compile()
    )
    return compiled.memory_analysis().temp_size_in_bytes


def test_blocked_memory_far_below_dense_at_4096():
    """Dense scores alone are [1, 4, 4096, 4096] float32 = 256 MiB; blocks of 256 stay small."""
    spec = _tiny_spec()
    dense = _temp_bytes(spec, 4096, 0)
    blocked = _temp_bytes(spec, 4096, 256)
    print(f"temp: dense {dense / 2**20:.1f} MiB, blocked {blocked / 2**20:.1f} MiB")
    assert dense > 4 * 4096 * 4096 * 4  # the dense path materialises the scores
    assert blocked < dense / 20
