"""The small shared pieces of every decoder: norms, activations, MLPs, projections.

All functions are pure: `(params subtree, activations, *, static choices) -> activations`. Weights
are cast to the activations' (compute) dtype at use; matmuls request `Precision.HIGHEST` so float32
stays float32 on TPUs (bf16 inputs are unaffected). Reductions inside norms run in float32.

Norm kinds (all over the last axis, D or E):
    "rms"           y = w * (x / rms(x)).astype(dtype)              Llama, Mistral, Qwen, Phi-3
    "rms_f32"       y = (w * (x / rms(x))).astype(dtype)            OLMo-2
    "rms_plus_one"  y = ((x / rms(x)) * (1 + w)).astype(dtype)      Gemma 1-3 (weights stored as w - 1)
    "layer"         y = (x - mean) / std * w + b                    GPT-2, GPT-NeoX, Starcoder2, Falcon
    "layer_nobias"  y = (x - mean) / std * w                        Cohere 1-2
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxeval.shapes import Float

HIGHEST = jax.lax.Precision.HIGHEST
NORM_KINDS = ("rms", "rms_f32", "rms_plus_one", "layer", "layer_nobias")
MLP_KINDS = ("gated", "plain")


def _gelu_tanh(x: jax.Array) -> jax.Array:
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): HF gelu_new / gelu_pytorch_tanh / gelu_fast.
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * jnp.power(x, 3.0))))


ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
}


def norm(p: dict[str, jax.Array], x: Float["... D"], *, kind: str, eps: float) -> Float["... D"]:
    """RMSNorm / Gemma's (1 + w) RMSNorm / LayerNorm, statistics in float32, result in x's dtype."""
    xf = x.astype(jnp.float32)
    if kind in ("layer", "layer_nobias"):
        mean = jnp.mean(xf, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + eps)
        y = y * p["scale"].astype(jnp.float32)
        if kind == "layer":
            y = y + p["bias"].astype(jnp.float32)
        return y.astype(x.dtype)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    if kind == "rms":
        return p["scale"].astype(x.dtype) * y.astype(x.dtype)
    if kind == "rms_f32":
        return (p["scale"].astype(jnp.float32) * y).astype(x.dtype)
    if kind == "rms_plus_one":
        return (y * (1.0 + p["scale"].astype(jnp.float32))).astype(x.dtype)
    raise ValueError(f"unknown norm kind {kind!r}; expected one of {NORM_KINDS}")


def dense(x: jax.Array, w: jax.Array, spec: str, bias: jax.Array | None = None) -> jax.Array:
    """`einsum(spec, x, w) (+ bias)` with the weight cast to x's dtype."""
    y = jnp.einsum(spec, x, w.astype(x.dtype), precision=HIGHEST)
    if bias is not None:
        y = y + bias.astype(x.dtype)
    return y


def mlp(
    p: dict[str, jax.Array], x: Float["B T D"], *, kind: str, activation: str
) -> Float["B T D"]:
    """Gated: down(act(gate x) * up x) (Llama, Gemma).  Plain: down(act(up x)) (GPT-2, NeoX)."""
    act = ACTIVATIONS[activation]
    up = dense(x, p["up"], "btd,df->btf", p.get("up_bias"))  # [B, T, F]
    if kind == "gated":
        h = act(dense(x, p["gate"], "btd,df->btf", p.get("gate_bias"))) * up
    elif kind == "plain":
        h = act(up)
    else:
        raise ValueError(f"unknown mlp kind {kind!r}; expected one of {MLP_KINDS}")
    return dense(h, p["down"], "btf,fd->btd", p.get("down_bias"))
