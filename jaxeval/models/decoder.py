"""The one generic decoder: embeddings, a `lax.scan` over stacked layers, final norm, LM head.

Every family is this decoder with different static choices in its `ModelSpec` (norm kind, MLP kind,
parallel residual, sandwich norms, learned positions, soft-capping, ...). Per-layer differences that
are numbers, not code paths (sliding-window size, rope table, attention scale), are [L, ...] arrays
scanned along with the stacked parameters, so a model compiles one layer body whatever its depth.

Two entry points share the layer body and differ only in where keys/values come from:

    hidden(params, tokens, positions, segment, parent)            packed rows, keys = this call's
    forward_cached(params, cache, tokens, positions, valid, index)  keys written to cache[index:index+T]
    forward_new(params, prefix, tokens, positions, valid, start)    keys returned, after a prefix row

each with the keyword `runtime` (`jaxeval.models.runtime.Runtime`: the mesh the rows stay on, the
attention and expert backends; `REFERENCE` by default).

`hidden` attends densely on short rows and block by block (online softmax, masked blocks skipped)
on long ones; `forward_cached` updates the cache in place and reads only its written slots.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval.models import attention as attn
from jaxeval.models.attention.sequence import sequence_split
from jaxeval.models.contract import KVCache
from jaxeval.models.experts import moe_block
from jaxeval.models.layers import HIGHEST, mlp, norm
from jaxeval.models.rope import dynamic_inv_freq, rope_cos_sin
from jaxeval.models.runtime import REFERENCE, Runtime
from jaxeval.platform.mesh import constrain_rows, constrain_rows_on_data, fsdp_splits
from jaxeval.shapes import Bool, Float, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters


def init_cache(spec, batch: int, length: int, dtype: Any) -> KVCache:
    """An empty cache of `length` slots per row (all slots invalid)."""
    lb, g, e = (spec.num_layers, batch), spec.cache_heads, spec.cache_head_dim
    return KVCache(
        k=jnp.zeros((*lb, g, e, length), dtype),
        v=jnp.zeros((*lb, g, length, e), dtype),
        valid=jnp.zeros((batch, length), bool),
        positions=jnp.zeros((batch, length), jnp.int32),
    )


def _layer_constants(spec) -> dict[str, jax.Array]:
    """Per-layer numbers scanned along with the layer parameters: window [L], scale [L], rope."""
    windows = [w if w else attn.NO_WINDOW for w in spec.sliding_window]
    out = {
        "window": jnp.asarray(np.array(windows, np.int32)),
        "scale": jnp.asarray(np.array(spec.attn_scale, np.float32)),
    }
    if spec.rope_layers:
        out["rope_on"] = jnp.asarray(np.array(spec.rope_layers, bool))
    if spec.rope:
        out["inv_freq"] = jnp.asarray(np.array([r.inv_freq for r in spec.rope], np.float32))
        out["rope_factor"] = jnp.asarray(
            np.array([r.attention_factor for r in spec.rope], np.float32)
        )
        if spec.rope[0].long_inv_freq is not None:
            long = [r.long_inv_freq for r in spec.rope]
            out["long_inv_freq"] = jnp.asarray(np.array(long, np.float32))
            out["long_after"] = jnp.asarray(np.array([r.long_after for r in spec.rope], np.int32))
    return out


def _stacks(spec, params: dict[str, Any], consts: dict[str, jax.Array]) -> list[tuple]:
    """(layer stack, its per-layer constants, its first layer index) in order: one stack, or an
    MoE model's dense first layers then its expert layers (`params.param_layout`)."""
    k = spec.dense_layers
    if not k:
        return [(params["layers"], consts, 0)]
    cut = lambda lo, hi: jax.tree.map(lambda c: c[lo:hi], consts)  # noqa: E731
    return [(params["dense_layers"], cut(0, k), 0), (params["layers"], cut(k, None), k)]


def embed(
    spec, params: dict[str, Any], tokens: Int["B T"], positions: Int["B T"]
) -> Float["B T D"]:
    """Token embeddings in the compute dtype (Gemma: times sqrt(D) in that dtype; GPT-2: + positions)."""
    dtype = jnp.dtype(spec.compute_dtype)
    x = jnp.take(params["embed"], tokens, axis=0).astype(dtype)  # [B, T, D]
    if spec.embed_scale is not None:
        x = x * jnp.asarray(spec.embed_scale, dtype)
    if spec.learned_positions:
        x = x + jnp.take(params["pos_embed"], positions, axis=0).astype(dtype)
    return x


def _rope(spec, positions, consts, dynamic, dtype):
    if not spec.rope and spec.dynamic_rope is None:
        return None, None
    inv_freq = dynamic if dynamic is not None else consts["inv_freq"]
    if "long_inv_freq" in consts:  # LongRoPE: long table once the call passes the original length
        use_long = jnp.max(positions) + 1 > consts["long_after"]
        inv_freq = jnp.where(use_long, consts["long_inv_freq"], inv_freq)
    factor = consts["rope_factor"] if "rope_factor" in consts else jnp.float32(1.0)
    cos, sin = rope_cos_sin(positions, inv_freq, factor, dtype)
    if "rope_on" in consts:  # a layer without rope (SmolLM3, Cohere-2, EXAONE-4): the identity
        # rotation, exactly: x * 1 + rotate(x) * 0 == x
        cos = jnp.where(consts["rope_on"], cos, jnp.ones_like(cos))
        sin = jnp.where(consts["rope_on"], sin, jnp.zeros_like(sin))
    return cos, sin


def _block(spec, runtime: Runtime, p, x, *, cos, sin, attend_fn, latent=False):
    """One decoder layer: pre-norm sequential (optionally sandwich-normed), parallel, or post-norm.

    Returns (x, aux) with `aux` from `attend_fn` (see `attention.attention_block`).
    """
    kind, eps = spec.norm, spec.norm_eps
    aux = []

    def residual(x, h):  # Granite scales each branch before adding it
        if spec.residual_scale is not None:
            h = h * jnp.asarray(spec.residual_scale, h.dtype)
        return x + h

    def attention(h):
        y, a = attn.attention_block(
            spec, p["attn"], h, cos=cos, sin=sin, attend_fn=attend_fn, latent=latent
        )
        aux.append(a)
        return y

    def feed_forward(h):
        if "moe" in p:  # the experts (a stack of MoE layers), else the dense MLP
            return moe_block(
                p["moe"], h, moe=spec.moe, backend=runtime.experts, mesh=runtime.rows_mesh
            )
        return mlp(p["mlp"], h, kind=spec.mlp, activation=spec.activation)

    if spec.residual == "parallel":  # GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x)
        a = attention(norm(p["attn_norm"], x, kind=kind, eps=eps))
        m = feed_forward(norm(p["mlp_norm"], x, kind=kind, eps=eps))
        return m + a + x, aux[0]
    if spec.residual == "parallel_shared":  # Cohere, Falcon-7B: one norm feeds both branches
        h = norm(p["attn_norm"], x, kind=kind, eps=eps)
        a = attention(h)
        return x + a + feed_forward(h), aux[0]
    if spec.residual == "post_norm":  # OLMo-2: x + norm(attn(x)), then x + norm(mlp(x))
        x = residual(x, norm(p["post_attn_norm"], attention(x), kind=kind, eps=eps))
        return residual(x, norm(p["post_mlp_norm"], feed_forward(x), kind=kind, eps=eps)), aux[0]
    h = attention(norm(p["attn_norm"], x, kind=kind, eps=eps))
    if spec.sandwich_norms:
        h = norm(p["post_attn_norm"], h, kind=kind, eps=eps)
    x = residual(x, h)
    h = feed_forward(norm(p["mlp_norm"], x, kind=kind, eps=eps))
    if spec.sandwich_norms:
        h = norm(p["post_mlp_norm"], h, kind=kind, eps=eps)
    return residual(x, h), aux[0]


def attention_block_size(
    length: int, block: int | None = None, *, runtime: Runtime = REFERENCE
) -> int:
    """The query/key block `hidden` uses at row length T = `length` (0 = the dense path): the
    rule of `runtime`'s attention backend (default: the reference's,
    `attention.XlaAttention.block_size`)."""
    return runtime.attention.block_size(length, block)


def hidden(
    spec,
    params: dict[str, Any],
    tokens: Int["B T"],
    positions: Int["B T"],
    segment: Int["B T"],
    parent: Int["B T"],
    *,
    runtime: Runtime = REFERENCE,
    attention_block: int | None = None,
) -> Float["B T D"]:
    """Final-normed hidden states of packed rows (the mask rule: `attention.Mask`).

    Long rows attend block by block through the runtime's attention backend (`runtime.attention.packed`:
    XLA's block loops, or a platform's kernel), short ones through the dense [B, H, T, T] scores;
    the backend's `block_size` draws the line. `attention_block` overrides the choice: 0 = always
    dense, Q > 0 = blocks of Q rows whenever T > Q.

    Long rows that do not divide over the mesh's batch devices split their tokens over them
    instead (`attention.sequence`: each layer's work on each device's own tokens, the keys
    gathered for attention).
    """
    dtype = jnp.dtype(spec.compute_dtype)
    b, t = tokens.shape
    windowed = any(spec.sliding_window)
    dynamic = dynamic_inv_freq(spec.dynamic_rope, positions) if spec.dynamic_rope else None
    backend = runtime.attention
    block = backend.block_size(t, attention_block)
    split = sequence_split(runtime.rows_mesh, rows=b, length=t, block=block)
    rope_positions = positions
    if split is not None:  # every token-wise step in device order, on each device's tokens
        block = split.block
        tokens, rope_positions = split.permute(tokens), split.permute(positions)
    x = embed(spec, params, tokens, rope_positions)
    blocked = block > 0
    base = None if blocked else attn.packed_mask(segment, parent)  # [B, T, T]

    def body(x, xs):
        p, consts = xs
        x = constrain_rows(x, runtime.rows_mesh) if split is None else split.constrain(x)
        cos, sin = _rope(spec, rope_positions, consts, dynamic, dtype)
        window = consts["window"] if windowed else None

        sinks = p["attn"].get("sinks")

        def attend_fn(q, k, v):
            if split is not None:
                out = split.attend(
                    backend, q, k, v, attn.Mask(segment, parent, positions, window),
                    scale=consts["scale"], softcap=spec.attn_softcap, sinks=sinks,
                )  # fmt: skip
                return out, None
            if blocked:
                init = None
                if sinks is not None:  # every query block starts from the sink
                    b, t, h, e = q.shape
                    g = k.shape[2]
                    init = attn.fold_sinks(attn.online_init((b, g, h // g, t), e), sinks)
                out = backend.packed(
                    q, k, v, attn.Mask(segment, parent, positions, window),
                    scale=consts["scale"], softcap=spec.attn_softcap, block=block, init=init,
                    mesh=runtime.rows_mesh,
                )  # fmt: skip
                return out, None
            allowed = base
            if windowed:
                allowed = base & attn.window_mask(positions, positions, window)
            out = attn.attend(
                q, k, v, allowed, scale=consts["scale"], softcap=spec.attn_softcap, sinks=sinks
            )
            return out, None

        x, _ = _block(spec, runtime, p, x, cos=cos, sin=sin, attend_fn=attend_fn)
        return x, None

    for stack, consts, _ in _stacks(spec, params, _layer_constants(spec)):
        x, _ = jax.lax.scan(body, x, (stack, consts), unroll=runtime.unroll_layers)
    x = norm(params["final_norm"], x, kind=spec.norm, eps=spec.norm_eps)
    return x if split is None else split.restore(x)


def weights_stay(spec, runtime: Runtime, tokens: int) -> bool:
    """Whether a call over `tokens` tokens leaves each layer's weights on their fsdp shards.

    With the rows of the hidden states split over the fsdp devices (`constrain_rows`), every
    device gathers each layer's whole weights; with them replicated over fsdp
    (`constrain_rows_on_data`), each device multiplies by its own slice of the contraction and the
    devices all-reduce the products. Weights stay when that moves fewer bytes, a layer's weights
    against the all-reduced float32 activations of `tokens` tokens: a decode step of 64 rows
    at Llama-3-8B moves 11 MB a layer instead of gathering 436 MB (the crossover is about
    2,300 tokens there, 310 at SmolLM2-135M). `_cached_layers` then pins the projections'
    products the same way, or the partitioner gathers the q/k/v weights to split their rows.
    """
    if not fsdp_splits(runtime.rows_mesh):
        return False
    layer = spec.body_param_count() / spec.num_layers * jnp.dtype(spec.compute_dtype).itemsize
    d, e = spec.hidden_size, spec.head_dim
    f = spec.intermediate_size
    if spec.moe is not None:
        f = spec.moe.expert_size * spec.moe.top_k + spec.moe.shared_size
    per_token = 4 * (3 * d + (spec.num_heads + 2 * spec.num_kv_heads) * e + 2 * f)
    return tokens * per_token < layer


def _cached_layers(
    spec, runtime, params, x, positions, cache, index, new_valid=None, slot_split=None,
    keys_in_device_order=False,
):  # fmt: skip
    """The layer scan of `forward_cached` and `forward_new`: each layer attends over its `cache`
    slots (`KVCache`, its valid flags and positions already holding this call's) before `index`
    (the backend's `cache_state`), then over this call's own keys (densely,
    or the backend's `packed` on a long prefill): `attention.cache_attend`'s steps, composed with
    the runtime's backend. Returns the hidden states before the final norm and every layer's new
    keys/values [L, B, T, G, E]. `slot_split`: the cache's slots split over the batch devices
    (`attention.slots`), each device reading its own. `keys_in_device_order`: a prompt whose
    tokens split returns its keys/values in the split's device order (`Split.permute`)."""
    dtype = jnp.dtype(spec.compute_dtype)
    windowed = any(spec.sliding_window)
    dynamic = dynamic_inv_freq(spec.dynamic_rope, positions) if spec.dynamic_rope else None
    backend = runtime.attention
    b, t = positions.shape
    new_block = backend.block_size(t)  # a long prefill: blocked, as `hidden`
    # a long prompt whose rows do not divide over the batch devices: its tokens split instead
    split = None
    if new_valid is not None:
        split = runtime.prompt_split(rows=b, length=t)
    q_positions = positions
    if split is not None:
        new_block = split.block
        x, q_positions = split.permute(x), split.permute(positions)

    stay = split is None and weights_stay(spec, runtime, b * t)
    pin = constrain_rows_on_data if stay else constrain_rows

    def body(x, xs):
        p, consts, layer = xs
        x = pin(x, runtime.rows_mesh) if split is None else split.constrain(x)
        cos, sin = _rope(spec, q_positions, consts, dynamic, dtype)

        def attend_fn(q, k, v):
            if stay:  # the projections' products, replicated over fsdp like x: no weight gather
                q, k, v = (pin(a, runtime.rows_mesh) for a in (q, k, v))
            window = consts["window"] if windowed else None
            scale, softcap, sinks = consts["scale"], spec.attn_softcap, p["attn"].get("sinks")
            read = functools.partial(backend.cache_state, mesh=runtime.rows_mesh)
            if slot_split is not None:
                read = functools.partial(slot_split.cache_state, backend)
            state = read(
                q, cache, layer, q_positions, index, window=window, scale=scale, softcap=softcap
            )
            if sinks is not None:
                state = attn.fold_sinks(state, sinks)
            # (the mask in token order; the keys cast in whatever order they are)
            k_new, v_new, own = attn.new_keys(
                q, k, v, cache, positions, index, window=window, new_valid=new_valid
            )
            if split is not None:  # each device its own queries against every key
                out = split.attend(
                    backend, q, k_new, v_new, own, scale=scale, softcap=softcap, init=state
                )
            elif new_block:  # a long prefill: its own keys block by block, from the cache's state
                out = backend.packed(
                    q, k_new, v_new, own, scale=scale, softcap=softcap, block=new_block,
                    init=state, mesh=runtime.rows_mesh,
                )  # fmt: skip
            else:
                out = attn.attend_new_keys(
                    q, k_new, v_new, own, state, scale=scale, softcap=softcap
                )
            return out, (k.astype(cache.k.dtype), v.astype(cache.v.dtype))

        return _block(spec, runtime, p, x, cos=cos, sin=sin, attend_fn=attend_fn, latent=True)

    ks, vs = [], []
    for stack, consts, first in _stacks(spec, params, _layer_constants(spec)):
        n = jax.tree.leaves(stack)[0].shape[0]
        layers = first + jnp.arange(n, dtype=jnp.int32)
        x, (k, v) = jax.lax.scan(body, x, (stack, consts, layers), unroll=runtime.unroll_layers)
        ks.append(k)  # [L, B, T, G, E] (this stack's L): this call's keys and values
        vs.append(v)
    k, v = (parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0) for parts in (ks, vs))
    if split is not None:  # back in token order
        x = split.restore(x)
        if not keys_in_device_order:
            k, v = split.restore(k, axis=2), split.restore(v, axis=2)
    return x, k, v


def forward_new(
    spec,
    params: dict[str, Any],
    prefix: KVCache,
    tokens: Int["B T"],
    positions: Int["B T"],
    valid: Bool["B T"],
    start: Int[""],
    *,
    runtime: Runtime = REFERENCE,
    split_keys: bool = False,
) -> tuple[Float["B T D"], Float["L B T G E"], Float["L B T G E"]]:
    """B prompts after a shared prefix: their hidden states and keys/values, nothing written.

    `prefix` is one cache row (its slots before `start` hold the prefix; 0 slots: no prefix) that
    every row's queries read, then each row's own T keys (causal, `valid`), exactly as
    `forward_cached` on a cache holding the prefix in every row with the tokens at slots
    [start, start + T). The caller writes the keys/values where it wants them (continuous
    batching: straight into the engine rows, `kernels.continuous.admit`), so no cache of B rows
    is built, filled and copied on the way.

    `split_keys`: when the prompts split their tokens over the batch devices
    (`Runtime.prompt_split`), their keys/values stay in the split's device order, each device's
    own (a caller writing them piece by piece, `attention.slots.SlotSplit.install`, saves two
    copies of every layer's keys and values).
    """
    x = embed(spec, params, tokens, positions)
    x, k, v = _cached_layers(
        spec, runtime, params, x, positions, prefix, start, new_valid=valid.astype(bool),
        keys_in_device_order=split_keys,
    )  # fmt: skip
    return norm(params["final_norm"], x, kind=spec.norm, eps=spec.norm_eps), k, v


def forward_cached(
    spec,
    params: dict[str, Any],
    cache: KVCache,
    tokens: Int["B T"],
    positions: Int["B T"],
    valid: Bool["B T"],
    index: Int[""] | IntB,
    *,
    runtime: Runtime = REFERENCE,
) -> tuple[Float["B T D"], KVCache]:
    """Writes T new keys/values at slots [index, index + T) in place and returns their hidden states.

    Prefill: one call with the left-padded prompts (index 0). Decode: T = 1 calls at index = P, P+1...
    `index` may be traced. Positions follow HF for left padding: cumsum(valid) - 1, clipped at 0.

    `index` is one slot for all rows ([]: `dynamic_update_slice`) or one per row ([B]: a scatter,
    slots past C dropped), for continuous batching, where each row started at its own time:

        index [5, 2]:  row 0 writes slot 5, row 1 slot 2; row 1's query sees slots 0..2 only

    The stacked cache is read, never carried, by the layer scan: layer l attends over its cache
    slots before `index` plus this call's own keys (`attention.cache_attend`), and the scan returns
    every layer's new keys/values [L, B, T, G, E]; one `dynamic_update_slice` (or scatter) after the
    scan writes them at (0, 0, index, 0, 0), in place on a loop-carried or donated buffer, so the
    scan never has to update a carried [L, B, ...] cache buffer in place layer by layer. (Measured on
    XLA:CPU at SmolLM2 shapes, the two layouts cost the same: a decode step does not grow with C at
    a fixed number of written slots; docs/performance.md.)

        scan over l:  out_l = attend(q, k[l, :, :index] + new keys)      ys: new keys/values
        after:        k[:, :, index:index+T] <- ys                         (one write, in place)

    With a per-row index on a cache whose rows do not divide over the batch devices (an engine
    of fewer rows than devices), the cache's slots split over them instead (`attention.slots`):
    each device reads and writes its own slots, the reads merged by their running maxima.
    """
    x = embed(spec, params, tokens, positions)
    index = jnp.asarray(index, jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    per_row = index.ndim == 1
    if per_row:
        b, t = tokens.shape
        rows = jnp.arange(b, dtype=jnp.int32)[:, None]  # [B, 1]
        slots = index[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]  # [B, T]

        def write_rows(buf, new):  # buf [B, C, ...] <- new [B, T, ...] at each row's slots
            return buf.at[rows, slots].set(new.astype(buf.dtype), mode="drop")

        slot_valid = write_rows(cache.valid, valid.astype(bool))
        slot_pos = write_rows(cache.positions, positions.astype(jnp.int32))
    else:
        slot_valid = jax.lax.dynamic_update_slice(cache.valid, valid.astype(bool), (zero, index))
        slot_pos = jax.lax.dynamic_update_slice(
            cache.positions, positions.astype(jnp.int32), (zero, index)
        )
    # the flags hold this call's slots now; its keys and values are written after the layers
    cache = cache._replace(valid=slot_valid, positions=slot_pos)
    # an engine of fewer rows than batch devices: each row's slots split over them
    split = None
    if per_row:
        split = runtime.slots_split(rows=b, slots=cache.valid.shape[1])
    x, k, v = _cached_layers(spec, runtime, params, x, positions, cache, index, slot_split=split)
    if split is not None:  # each device writes the slots it holds
        cache = split.write_slots(runtime.attention, cache, k, v, index)
    else:  # the backend's cache write (the reference: one scatter, or one `dynamic_update_slice`)
        cache = runtime.attention.write_slots(cache, k, v, index, mesh=runtime.rows_mesh)
    x = norm(params["final_norm"], x, kind=spec.norm, eps=spec.norm_eps)
    return x, cache


def head_weight(spec, params: dict[str, Any]) -> Float["V D"]:
    """The output embedding: the tied input embedding or the separate lm_head."""
    return params["embed"] if spec.tie_embeddings else params["lm_head"]


def finalize_logits(spec, logits: jax.Array) -> jax.Array:
    """Elementwise post-processing of logits: a scale (Cohere, Granite), Gemma-2's final
    soft-capping, else identity."""
    if spec.logit_scale is not None:
        logits = logits * jnp.asarray(spec.logit_scale, logits.dtype)
    if spec.final_softcap is None:
        return logits
    cap = jnp.asarray(spec.final_softcap, logits.dtype)
    return jnp.tanh(logits / cap) * cap


def head(spec, params: dict[str, Any], h: Float["... D"]) -> Float["... V"]:
    """Logits = finalize_logits(h @ head_weight.T), in h's dtype."""
    w = head_weight(spec, params).astype(h.dtype)
    return finalize_logits(spec, jnp.einsum("...d,vd->...v", h, w, precision=HIGHEST))
