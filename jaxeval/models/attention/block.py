"""A layer's attention block: projections, q/k norms, rotary, the attention itself, the output.

    y, aux = attention_block(spec, p, x, cos=cos, sin=sin, attend_fn=attend_fn)

`attend_fn(q [B, T, H, E], k [B, T, G, E], v [B, T, G, E]) -> (out [B, T, H, E], aux)` is the
caller's choice of attention (`decoder.hidden`: dense or the backend's packed rows;
`decoder.forward_cached`: the backend's cache state, then the call's own keys); `aux` is whatever
the caller needs back (the keys and values to write, or None). Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxeval.models.layers import dense, norm
from jaxeval.models.mla import mla_latent_output, mla_latent_qkv, mla_output, mla_qkv
from jaxeval.models.rope import apply_rope
from jaxeval.shapes import Float

# attend(q [B, T, H, E], k [B, T, G, E], v [B, T, G, E]) -> (out [B, T, H, E], aux): the keys and
# values are this call's; `aux` is whatever the caller needs back (the updated cache, or None).
AttendFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]


def _norm_heads(p: dict[str, jax.Array], x: Float["B T H E"], *, kind: str, eps: float):
    b, t, h, e = x.shape
    flat = {name: w.reshape(h * e) for name, w in p.items()}
    return norm(flat, x.reshape(b, t, h * e), kind=kind, eps=eps).reshape(b, t, h, e)


def attention_block(
    spec,
    p: dict[str, jax.Array],
    x: Float["B T D"],
    *,
    cos: Float["B T E'"] | None,
    sin: Float["B T E'"] | None,
    attend_fn: AttendFn,
    latent: bool = False,
) -> tuple[Float["B T D"], Any]:
    """Projections, optional q/k norms, rotary, `attend_fn(q, k, v)`, output projection.

    `attend_fn` chooses the attention (dense, blocked, or over the KV cache) and returns
    (out [B, T, H, E], aux); this returns (y [B, T, D], aux). `latent`: MLA in its latent form
    (the KV cache's: `mla.py`), else expanded; other models ignore it.
    """
    if spec.mla is not None:  # DeepSeek: latent projections, rope part first (`mla.py`)
        qkv, output = (mla_latent_qkv, mla_latent_output) if latent else (mla_qkv, mla_output)
        q, k, v = qkv(spec, p, x)
        if cos is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out, aux = attend_fn(q, k, v)
        return output(spec, p, out), aux
    q = dense(x, p["q"], "btd,dhe->bthe", p.get("q_bias"))  # [B, T, H, E]
    k = dense(x, p["k"], "btd,dge->btge", p.get("k_bias"))  # [B, T, G, E]
    v = dense(x, p["v"], "btd,dge->btge", p.get("v_bias"))  # [B, T, G, E]
    if spec.qk_norm in ("head", "per_head"):  # over E; one scale [E], or one per head [H, E]
        q = norm(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = norm(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    elif spec.qk_norm == "heads":  # over all H*E features of the projection
        q = _norm_heads(p["q_norm"], q, kind=spec.norm, eps=spec.norm_eps)
        k = _norm_heads(p["k_norm"], k, kind=spec.norm, eps=spec.norm_eps)
    if cos is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    out, aux = attend_fn(q, k, v)
    return dense(out, p["o"], "bthe,hed->btd", p.get("o_bias")), aux
