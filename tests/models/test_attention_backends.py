"""The attention seam's contract: `AttentionBackend` is total, `Mask` is one pytree.

- Every backend (`xla`, `cpu`, `tpu`, `gpu`) implements every method of the Protocol in its own
  class (none inherits another's) and is frozen and hashable (a static argument).
- Where a backend's kernel does not apply it answers with the reference itself, bit for bit: a
  prefill's state over the cache (`cache_state` with T > 1), bfloat16 packed rows on the `cpu`
  backend, a shared-index cache write on the `tpu` backend.
- `Mask` passes through `jax.jit` and `jax.tree.map`; `window` None stays None (no window term).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.models import attention as attn
from jaxeval.models.attention.backend import AttentionBackend
from jaxeval.models.contract import KVCache

PROTOCOL = ("block_size", "packed", "cache_state", "write_slots")
BACKENDS = [
    attn.XLA,
    attn.CPU,
    attn.TpuAttention(interpret=True),
    attn.GpuAttention(implementation="xla"),
]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_every_backend_implements_every_method(backend):
    assert isinstance(backend, AttentionBackend)
    assert type(backend).__bases__ == (object,)  # composition, not inheritance
    for name in PROTOCOL:
        assert name in vars(type(backend)), f"{backend.name} lacks its own {name}"
    assert isinstance(backend.cache_block, int) and backend.name
    hash(backend)
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.name = "other"


def _cache(rng, b=2, t=3, g=2, x=2, e=8, c=16, layers=2):
    q = jnp.asarray(rng.standard_normal((b, t, g * x, e)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((layers, b, g, e, c)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((layers, b, g, c, e)), jnp.float32)
    valid = jnp.asarray(rng.random((b, c)) > 0.2)
    positions = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), (b, c))
    index = jnp.asarray([5, 9], jnp.int32)
    q_pos = index[:, None] + jnp.arange(t, dtype=jnp.int32)
    return q, KVCache(k=k, v=v, valid=valid, positions=positions), jnp.int32(1), q_pos, index


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_a_prefill_over_the_cache_is_the_reference(backend):
    args = _cache(np.random.default_rng(0))
    kw = {"window": None, "scale": jnp.float32(0.3), "softcap": None}
    got = jax.jit(lambda *a: backend.cache_state(*a, **kw))(*args)
    want = jax.jit(lambda *a: attn.cache_state(*a, **kw, block=backend.cache_block))(*args)
    m, total, acc = got  # [B, G, X, T], [B, G, X, T, E]
    assert m.shape == total.shape == (2, 2, 2, 3) and acc.shape == (2, 2, 2, 3, 8)
    for a, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(w))


def test_cpu_backend_hands_bfloat16_rows_to_the_reference():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 32, n, 8)), jnp.bfloat16) for n in (4, 2, 2))
    seg = jnp.ones((1, 32), jnp.int32)
    mask = attn.Mask(seg, 0 * seg, jnp.arange(32, dtype=jnp.int32)[None])
    kw = {"scale": jnp.float32(0.3), "softcap": None, "block": 8, "init": None}
    got = jax.jit(lambda q, k, v, m: attn.CPU.packed(q, k, v, m, **kw))(q, k, v, mask)
    want = jax.jit(lambda q, k, v, m: attn.blocked_attend(q, k, v, m, **kw))(q, k, v, mask)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_tpu_backend_writes_a_shared_index_as_the_reference():
    rng = np.random.default_rng(2)
    cache = KVCache(
        k=jnp.zeros((2, 2, 1, 4, 8), jnp.float32),
        v=jnp.zeros((2, 2, 1, 8, 4), jnp.float32),
        valid=jnp.ones((2, 8), bool),
        positions=jnp.zeros((2, 8), jnp.int32),
    )
    k, v = (jnp.asarray(rng.standard_normal((2, 2, 3, 1, 4)), jnp.float32) for _ in range(2))
    for index in (jnp.int32(2), jnp.asarray([0, 6], jnp.int32)):  # shared; per row, T = 3
        got = attn.TpuAttention(interpret=True).write_slots(cache, k, v, index)
        want = attn.write_slots(cache, k, v, index)
        for a, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(w))


def test_mask_is_one_pytree():
    seg = jnp.asarray([[1, 1, 2, 0]], jnp.int32)
    mask = attn.Mask(seg, 0 * seg, jnp.arange(4)[None])
    assert mask.window is None and len(jax.tree.leaves(mask)) == 3
    doubled = jax.jit(lambda m: jax.tree.map(lambda a: 2 * a, m))(mask)
    assert isinstance(doubled, attn.Mask) and doubled.window is None
    assert np.asarray(doubled.segment).tolist() == [[2, 2, 4, 0]]
    windowed = mask._replace(window=jnp.int32(3))
    assert len(jax.tree.leaves(windowed)) == 4
