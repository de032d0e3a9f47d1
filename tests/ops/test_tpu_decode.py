"""The Pallas TPU decode kernel (`jaxeval/ops/attention/tpu_decode.py`) against the `xla` reference.

- One-token steps give the same output with the `tpu` backend's cache state (the kernel, Pallas
  interpret mode on the CPU) as the reference's `cache_attend` with its loop over cache blocks:
  head sizes 64 and 128, GQA 8:1 and 3:1, per-row bounds of 0, 1 (inside the first block), some
  and all C slots, C not a multiple of the block (a ragged last block), invalid slots, a sliding
  window, Gemma-2's soft-cap, a bfloat16 cache under float32 queries and bfloat16 throughout, the
  layer picked at run time from a stacked cache. float32 within 2e-6, bfloat16 within 2e-2 (absolute).
- Slots at or past a row's bound are never used: NaN there (the rest of the last block and every
  later block; interpret mode also pads the ragged last block past C with NaN) leaves the state bit
  for bit unchanged; a row that sees nothing gets (MASKED, 0, 0); the index maps clamp to the
  row's last needed block (the module docstring's table) and pick the run-time layer.
- It compiles for a TPU v5e at Llama-3-8B decode shapes into one `tpu_custom_call` that takes the
  cache as it is (no copy), and declares the K/V bytes of one layer as its cost.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.models import attention
from jaxeval.models.contract import KVCache
from jaxeval.ops.attention import tpu_decode
from jaxeval.plan.topology import libtpu_available
from tests.helpers.tpu import single_tpu_mesh


def _case(seed, *, layers, g, x, e, c, bounds, q_dtype, cache_dtype):
    """Random q [B, 1, H, E], caches, new keys and bookkeeping; the step's own slot is valid."""
    rng = np.random.default_rng(seed)
    b = len(bounds)
    index = np.asarray(bounds, np.int32)
    valid = rng.random((b, c)) > 0.25  # invalid slots in the middle of every row
    valid[np.arange(b), np.minimum(index, c - 1)] = True
    return dict(
        q=jnp.asarray(rng.standard_normal((b, 1, g * x, e)), q_dtype),
        k_cache=jnp.asarray(rng.standard_normal((layers, b, g, e, c)), cache_dtype),
        v_cache=jnp.asarray(rng.standard_normal((layers, b, g, c, e)), cache_dtype),
        valid=jnp.asarray(valid),
        positions=jnp.asarray(np.broadcast_to(np.arange(c, dtype=np.int32), (b, c))),
        index=jnp.asarray(index),
        k_new=jnp.asarray(rng.standard_normal((b, 1, g, e)), q_dtype),
        v_new=jnp.asarray(rng.standard_normal((b, 1, g, e)), q_dtype),
    )


def _kv(data) -> KVCache:
    return KVCache(data["k_cache"], data["v_cache"], data["valid"], data["positions"])


@functools.partial(jax.jit, static_argnames=("windowed", "softcap", "backend"))
def _decode(data, layer, window, *, windowed, softcap, backend):
    """One decode step's attention output [B, 1, H, E] as float32 (one program for every layer):
    the reference's `cache_attend` (`backend` None), else the backend's cache state (the kernel,
    interpreted) continued over the step's own key as the decoder does."""
    q, cache = data["q"], _kv(data)
    cached = (q, cache, layer, data["index"][:, None])
    kw = dict(window=window if windowed else None, scale=jnp.float32(q.shape[-1] ** -0.5))
    if backend is None:
        out = attention.cache_attend(
            *cached, data["index"], data["k_new"], data["v_new"], **kw, softcap=softcap, block=128
        )
        return out.astype(jnp.float32)
    state = backend.cache_state(*cached, data["index"], **kw, softcap=softcap)
    k_new, v_new, own = attention.new_keys(
        q, data["k_new"], data["v_new"], cache, data["index"][:, None], data["index"],
        window=kw["window"],
    )  # fmt: skip
    out = attention.attend_new_keys(q, k_new, v_new, own, state, scale=kw["scale"], softcap=softcap)
    return out.astype(jnp.float32)


CASES = {
    # name: (layers, G, X, E, C, kernel block, bounds, window, softcap, q dtype, cache dtype, atol)
    "e64_gqa3_ragged": (2, 2, 3, 64, 1000, 256, (0, 1, 130, 700, 1000), None, None,
                        jnp.float32, jnp.float32, 2e-6),
    "e128_gqa8_window_cap_bf16cache": (3, 1, 8, 128, 640, 256, (1, 255, 256, 600, 640), 100, 50.0,
                                       jnp.float32, jnp.bfloat16, 2e-6),
    "e128_gqa8_bf16": (2, 2, 8, 128, 512, 128, (3, 129, 384, 512), 200, 50.0,
                       jnp.bfloat16, jnp.bfloat16, 2e-2),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_kernel_equals_reference(name):
    layers, g, x, e, c, block, bounds, window, softcap, q_dtype, cache_dtype, atol = CASES[name]
    data = _case(
        len(name), layers=layers, g=g, x=x, e=e, c=c, bounds=bounds,
        q_dtype=q_dtype, cache_dtype=cache_dtype,
    )  # fmt: skip
    static = dict(windowed=window is not None, softcap=softcap)
    for layer in (0, layers - 1):  # one program, the layer a run-time value
        args = (data, jnp.int32(layer), jnp.int32(window or 0))
        reference = np.asarray(_decode(*args, **static, backend=None))
        backend = attention.TpuAttention(interpret=True, cache_block=block)
        kernel = np.asarray(_decode(*args, **static, backend=backend))
        assert kernel.shape == (len(bounds), 1, g * x, e)
        assert np.isfinite(kernel).all()
        np.testing.assert_allclose(kernel, reference, rtol=0, atol=atol, err_msg=f"layer {layer}")


@functools.partial(jax.jit, static_argnames=("interpret", "block"))
def _state(data, layer, bound, window, *, interpret, block):
    """The kernel's own (m, total, acc) for the data of `_case`, soft-capped at 30."""
    q = data["q"]
    b, _, h, e = q.shape
    g = data["k_cache"].shape[2]
    qm = q.reshape(b, g, h // g, e)  # [B, G, X, E]
    return tpu_decode.decode_state(
        qm, _kv(data), layer, bound, data["index"], window, jnp.float32(e**-0.5), 30.0,
        block=block, interpret=interpret,
    )  # fmt: skip


def test_slots_past_the_bound_are_never_used():
    """NaN in every slot at or past each row's bound, of every layer (and, in interpret mode, in the
    ragged last block's tail past C): the state is bit for bit unchanged."""
    c, block = 600, 256  # blocks [0, 256), [256, 512), [512, 600) + a stale tail
    bound = np.array([0, 1, 256, 300, 600], np.int32)
    data = _case(7, layers=2, g=1, x=2, e=128, c=c, bounds=bound,
                 q_dtype=jnp.float32, cache_dtype=jnp.float32)  # fmt: skip
    past = np.arange(c)[None, :] >= bound[:, None]  # [B, C]
    poisoned = dict(data)
    poisoned["k_cache"] = jnp.where(past[None, :, None, None, :], jnp.nan, data["k_cache"])
    poisoned["v_cache"] = jnp.where(past[None, :, None, :, None], jnp.nan, data["v_cache"])
    args = (jnp.int32(1), jnp.asarray(bound), jnp.int32(1000))
    clean = [np.asarray(a) for a in _state(data, *args, interpret=True, block=block)]
    dirty = [np.asarray(a) for a in _state(poisoned, *args, interpret=True, block=block)]
    for a, d in zip(clean, dirty):
        assert np.isfinite(d).all()
        np.testing.assert_array_equal(d, a)
    m, total, acc = clean  # row 0 sees nothing: the state that a later key alone decides
    assert (m[0] == attention.MASKED).all() and (total[0] == 0).all() and (acc[0] == 0).all()
    assert (total[1:] > 0).all()


def test_index_maps_clamp_to_the_last_needed_block():
    """The module docstring's table (C = 2,048, Q = 512) is what the index maps and the guard do:
    per row, the block each grid step reads, the distinct blocks fetched and those computed."""
    rows = re.findall(
        r"^ +\d +([\d,]+) +(?:read_block)? +(\d) +(\d) +(\d) +(\d) +(.+?)  +(\S.*)$",
        tpu_decode.__doc__,
        re.MULTILINE,
    )
    assert len(rows) == 4
    for bound, *steps, fetched, computed in rows:
        bound = int(bound.replace(",", ""))
        reads = [int(tpu_decode.read_block(j, bound, 512)) for j in range(4)]
        assert reads == [int(j) for j in steps]
        assert sorted(set(reads)) == [int(j) for j in re.findall(r"\d+", fetched.split("(")[0])]
        guarded = [j for j in range(4) if j * 512 < bound]  # pl.when(j * Q < bound)
        assert guarded == [int(j) for j in re.findall(r"\d+", computed)]
    assert [int(tpu_decode.read_block(3, b, 512)) for b in (511, 512, 513, 1024, 1025)] == [
        0, 0, 1, 1, 2,
    ]  # fmt: skip
    (_, keys, values, meta), _ = tpu_decode._specs(4, 128, 512, 1)
    layer, bounds = np.array([2]), np.array([700, 1])
    refs = (layer, bounds, None, None, None)  # scalar prefetch: layer, bound, q_pos, window, scale
    assert tuple(int(i) for i in keys.index_map(0, 5, 3, *refs)) == (2, 0, 5, 0, 1)
    assert tuple(int(i) for i in values.index_map(1, 5, 3, *refs)) == (2, 1, 5, 0, 0)
    assert tuple(int(i) for i in meta.index_map(0, 5, 2, *refs)) == (0, 0, 1)
    assert tpu_decode.block_size(300, 512) == 300 and tpu_decode.block_size(4096, 512) == 512
    with pytest.raises(ValueError, match="multiple of 128"):
        tpu_decode.block_size(4096, 500)


@pytest.mark.skipif(not libtpu_available(), reason="libtpu is not installed")
def test_compiles_for_tpu_at_llama3_8b_decode_shapes():
    mesh = single_tpu_mesh("v5e-8")
    layers, b, g, x, e, c = 4, 64, 8, 4, 128, 4096
    bf16 = jnp.bfloat16

    def arg(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P()))

    args = (
        arg((b, g, x, e), bf16), arg((layers, b, g, e, c), bf16), arg((layers, b, g, c, e), bf16),
        arg((), jnp.int32), arg((b,), jnp.int32), arg((b, c), jnp.bool_), arg((b, c), jnp.int32),
        arg((b,), jnp.int32), arg((), jnp.int32), arg((), jnp.float32),
    )  # fmt: skip

    def step(qm, k, v, layer, bound, valid, slot_pos, q_pos, window, scale):
        cache = KVCache(k=k, v=v, valid=valid, positions=slot_pos)
        return tpu_decode.decode_state(qm, cache, layer, bound, q_pos, window, scale, None)

    compiled = jax.jit(step).lower(*args).compile()
    text = compiled.as_text()
    assert text.count('custom_call_target="tpu_custom_call"') == 1
    entry = text[text.index("ENTRY") :]
    made = re.findall(r"%\S+ = bf16\[4,64,8,128,4096\]\S* (\w[\w-]*)\(", entry)
    assert made == ["parameter"]  # the kernel reads the K cache itself: no copy, no transpose
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    kv_bytes = 2 * b * g * c * e * 2  # K and V of one layer
    assert kv_bytes <= cost["bytes accessed"] <= 1.02 * kv_bytes
    assert cost["flops"] >= 4 * b * g * x * c * e
