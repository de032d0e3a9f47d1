"""Rotary position embeddings: frequency tables from HF configs, and applying them to q/k.

Frequencies are computed on the host once per model (numpy float32, the same operation order as
transformers' `ROPE_INIT_FUNCTIONS`) and stored in the hashable `ModelSpec` as one tuple per layer,
so that Gemma-3's local/global bases, or any per-layer difference, is just a row of an [L, E'/2]
table scanned along the layers. Dimension names: `jaxeval.shapes`.

The one rope type that depends on the batch is `dynamic` (NTK): transformers recomputes the base from
`max(position_ids) + 1` once that exceeds `max_position_embeddings`. We do the same per call
(`dynamic_inv_freq`), without transformers' sticky cache of the largest length seen so far.

    positions [B, T] = [[0, 1, 2]],  inv_freq [E'/2] = [1.0, 0.01]
    angles [B, T, E'] = [[[0, 0, 0, 0], [1, .01, 1, .01], [2, .02, 2, .02]]]   (halves repeated)
    x_rot = x[..., :E'] * cos + rotate_half(x[..., :E']) * sin;  x[..., E':] passes unchanged
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.shapes import Float, Int

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DynamicRope:
    """Parameters of dynamic-NTK rope, recomputed from the batch's largest position at run time."""

    base: float
    factor: float
    dim: int
    max_position_embeddings: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerRope:
    """One layer's rotary table: `inv_freq` [E'/2] and the cos/sin scale (yarn's attention factor).

    LongRoPE (Phi-3) has a second table, used for a call whose largest position + 1 exceeds
    `long_after` (the original pretraining length), as transformers switches per forward.
    """

    inv_freq: tuple[float, ...]
    attention_factor: float = 1.0
    long_inv_freq: tuple[float, ...] | None = None
    long_after: int = 0


def _base_inv_freq(base: float, dim: int) -> np.ndarray:
    """1 / base^(2i/dim), float32 throughout like `torch.arange(0, dim, 2).float() / dim`."""
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(base) ** exponent)).astype(np.float32)


def _llama3(inv_freq: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    factor = params["factor"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    old_len = params["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = np.float32(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq)
    smooth = (np.float32(old_len) / wavelen - np.float32(low)) / np.float32(high - low)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def yarn_mscale(scale: float, m: float = 1.0) -> float:
    """YaRN's magnitude correction for a context stretched `scale` times (transformers'
    `get_mscale`): 1 + 0.1 m ln(scale), or 1 when not stretched."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _yarn(base: float, dim: int, params: dict[str, Any], max_pos: int) -> tuple[np.ndarray, float]:
    factor = params.get("factor")
    orig = params["original_max_position_embeddings"]
    if factor is None:
        factor = max_pos / orig

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        ms, ms_all = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = (
            yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all)
            if ms and ms_all
            else yarn_mscale(factor)
        )
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = np.float32(base) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))
    extrapolation = np.float32(1.0) / pos_freqs
    interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extra_factor = 1 - ramp
    inv = interpolation * (1 - extra_factor) + extrapolation * extra_factor
    return inv.astype(np.float32), float(attention_factor)


def _longrope(base: float, dim: int, params: dict[str, Any], max_pos: int) -> LayerRope:
    orig = params["original_max_position_embeddings"]
    factor = params.get("factor") or max_pos / orig
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        )
    shape = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    powers = np.float32(base) ** shape

    def table(ext: list[float]) -> tuple[float, ...]:
        inv = np.float32(1.0) / (np.asarray(ext, np.float32) * powers)
        return tuple(inv.astype(np.float32).tolist())

    return LayerRope(
        inv_freq=table(params["short_factor"]),
        attention_factor=float(attention_factor),
        long_inv_freq=table(params["long_factor"]),
        long_after=int(orig),
    )


def layer_rope(
    params: dict[str, Any], *, dim: int, max_position_embeddings: int
) -> LayerRope | DynamicRope:
    """The rotary table of one layer from its (standardised) rope parameter dict.

    `params` holds `rope_type` and `rope_theta` plus the type's own keys, as transformers 5 keeps them
    in `config.rope_parameters` (see `families.rope_parameters` for older configs).
    """
    rope_type = params.get("rope_type", params.get("type", "default"))
    base = float(params["rope_theta"])
    if rope_type == "default":
        return LayerRope(inv_freq=tuple(_base_inv_freq(base, dim).tolist()))
    if rope_type == "linear":
        inv = (_base_inv_freq(base, dim) / np.float32(params["factor"])).astype(np.float32)
        return LayerRope(inv_freq=tuple(inv.tolist()))
    if rope_type == "llama3":
        return LayerRope(inv_freq=tuple(_llama3(_base_inv_freq(base, dim), params).tolist()))
    if rope_type == "yarn":
        inv, attention_factor = _yarn(base, dim, params, max_position_embeddings)
        return LayerRope(inv_freq=tuple(inv.tolist()), attention_factor=attention_factor)
    if rope_type == "longrope":
        return _longrope(base, dim, params, max_position_embeddings)
    if rope_type == "dynamic":
        return DynamicRope(
            base=base,
            factor=float(params["factor"]),
            dim=dim,
            max_position_embeddings=max_position_embeddings,
        )
    raise JaxevalError(
        f"rope type {rope_type!r} is not supported",
        hint=f"supported rope types: {', '.join(SUPPORTED_ROPE_TYPES)}",
    )


def dynamic_inv_freq(rope: DynamicRope, positions: Int["B T"]) -> Float["E'/2"]:
    """Dynamic-NTK frequencies for this call: the base grows once max(positions) + 1 > max length."""
    seq_len = jnp.max(positions) + 1
    length = jnp.maximum(seq_len, rope.max_position_embeddings).astype(jnp.float32)
    scale = rope.factor * length / rope.max_position_embeddings - (rope.factor - 1)
    base = rope.base * scale ** (rope.dim / (rope.dim - 2))
    exponent = jnp.arange(0, rope.dim, 2, dtype=jnp.float32) / rope.dim
    grown = 1.0 / (base**exponent)
    static = jnp.asarray(_base_inv_freq(rope.base, rope.dim))
    return jnp.where(seq_len > rope.max_position_embeddings, grown, static)


def rope_cos_sin(
    positions: Int["B T"], inv_freq: Float["E'/2"], attention_factor: Float[""], dtype: Any
) -> tuple[Float["B T E'"], Float["B T E'"]]:
    """cos and sin of `positions * inv_freq` (halves repeated), scaled, cast to the compute dtype."""
    freqs = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, E'/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)  # [B, T, E']
    cos = (jnp.cos(angles) * attention_factor).astype(dtype)
    sin = (jnp.sin(angles) * attention_factor).astype(dtype)
    return cos, sin


def apply_rope(x: Float["B T H E"], cos: Float["B T E'"], sin: Float["B T E'"]) -> Float["B T H E"]:
    """Rotates the first E' = cos.shape[-1] features of every head (the NeoX "rotate_half" layout)."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    out = x_rot * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    if x_pass.shape[-1] == 0:
        return out
    return jnp.concatenate([out, x_pass], axis=-1)
