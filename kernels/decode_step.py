"""One decode step with the KV cache updated in place: the same maths as `spec.forward_cached`.

`decoder.forward_cached` scans the layers with the cache as scanned input and output
(`xs=(..., cache.k, cache.v)`, `ys=(k, v)`), which makes XLA write a fresh [L, B, C, G, E] cache on
every call. That is fine for the one prefill, but in the decode loop it copies the whole cache per
generated token. Here the stacked cache rides in the scan *carry* and each layer writes its new
keys/values with `dynamic_update_slice` at (layer, 0, index, 0, 0), which XLA performs in place on
the loop-carried buffer; each layer then attends to its slice of the updated cache:

    carry (x, k[L, B, C, G, E], v)   layer l:  k[l, :, index:index+T] <- new keys   (in place)
                                               attend(q, k[l], v[l])

The layer body is the decoder's own (`decoder._block`, same masks, rope and norms), so the hidden
states equal `forward_cached`'s; the parity tests against transformers cover both paths.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models import attention as attn
from jaxeval.models import decoder
from jaxeval.models.decoder import KVCache
from jaxeval.models.layers import norm
from jaxeval.models.rope import dynamic_inv_freq
from jaxeval.shapes import Bool, Float, Int


def forward_cached_inplace(
    spec: Any,
    params: dict[str, Any],
    cache: KVCache,
    tokens: Int["B T"],
    positions: Int["B T"],
    valid: Bool["B T"],
    index: Int[""],
) -> tuple[Float["B T D"], KVCache]:
    """`spec.forward_cached` with the cache carried through the layer scan (module docstring)."""
    dtype = jnp.dtype(spec.compute_dtype)
    t = tokens.shape[1]
    x = decoder.embed(spec, params, tokens, positions)
    index = jnp.asarray(index, jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    slot_valid = jax.lax.dynamic_update_slice(cache.valid, valid.astype(bool), (zero, index))
    slot_pos = jax.lax.dynamic_update_slice(
        cache.positions, positions.astype(jnp.int32), (zero, index)
    )
    base = attn.cache_mask(slot_valid, index, t)  # [B, T, C]
    windowed = any(spec.sliding_window)
    dynamic = dynamic_inv_freq(spec.dynamic_rope, positions) if spec.dynamic_rope else None

    def body(carry, xs):
        x, k_all, v_all = carry  # k_all [L, B, C, G, E]
        p, consts, layer = xs
        cos, sin = decoder._rope(spec, positions, consts, dynamic, dtype)
        allowed = base
        if windowed:
            allowed = base & attn.window_mask(positions, slot_pos, consts["window"])
        written = {}

        def kv_update(k, v):
            start = (layer, zero, index, zero, zero)
            written["k"] = jax.lax.dynamic_update_slice(k_all, k[None].astype(k_all.dtype), start)
            written["v"] = jax.lax.dynamic_update_slice(v_all, v[None].astype(v_all.dtype), start)
            keys = jax.lax.dynamic_index_in_dim(written["k"], layer, 0, keepdims=False)
            values = jax.lax.dynamic_index_in_dim(written["v"], layer, 0, keepdims=False)
            return keys.astype(dtype), values.astype(dtype)

        x = decoder._block(
            spec,
            p,
            x,
            cos=cos,
            sin=sin,
            allowed=allowed,
            scale=consts["scale"],
            kv_update=kv_update,
        )
        return (x, written["k"], written["v"]), None

    layers = jnp.arange(spec.num_layers, dtype=jnp.int32)
    xs = (params["layers"], decoder._layer_constants(spec), layers)
    (x, k, v), _ = jax.lax.scan(body, (x, cache.k, cache.v), xs)
    x = norm(params["final_norm"], x, kind=spec.norm, eps=spec.norm_eps)
    return x, KVCache(k=k, v=v, valid=slot_valid, positions=slot_pos)
