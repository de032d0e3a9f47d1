"""DeepSeek's multi-head latent attention (MLA): low-rank q and kv projections with a decoupled rope.

Per token, MLA compresses the keys and values of all H heads into one latent c of R_kv features (plus
one shared rope key of E_r features), and the queries through a latent of R_q features (or directly):

    c_q = rms(x W_qa)            q = c_q W_qb             [H, E_r + E_n]   (or q = x W_q)
    c   = rms(x W_kva)           k_n = c W_kb [H, E_n]    v = c W_vb [H, E_v]
    k_r = x W_kr [E_r]           k = [rope(k_r) for every head, k_n]       q = [rope(q_r), q_n]

Here the heads are laid out rope part first ([E_r | E_n], not HF's [E_n | E_r]): every q.k is the
same sum, and the decoder's rope rotates the first E' features of a head. DeepSeek rotates
interleaved pairs; the loader reorders those features once (`hf_weights.deinterleave`), so the
decoder's one rotate-half rope gives the same q.k. The values are zero-padded from E_v to the q/k
head dim E = E_r + E_n, so that the attention paths and the KV cache see one head dim; the output
projection reads the first E_v features. The cache holds the expanded per-head keys and values
(H x 2E per token and layer).

Parameters of the attention, stacked over layers (`mla_param_layout`):

    q [L, D, H, E]  or  q_a [L, D, R_q], q_a_norm {scale [L, R_q]}, q_b [L, R_q, H, E]
    kv_a [L, D, R_kv], kv_a_norm {scale [L, R_kv]}, k_rope [L, D, E_r]
    k_b [L, R_kv, H, E_n], v_b [L, R_kv, H, E_v], o [L, H, E_v, D]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from jaxeval.models.layers import dense, norm
from jaxeval.models.param_info import ParamInfo
from jaxeval.shapes import Float


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLASpec:
    """The static shape of MLA (HF names in comments). The q/k head dim is rope_dim + nope_dim."""

    q_lora_rank: int  # R_q (q_lora_rank); 0 = a direct q projection (DeepSeek-V2-Lite)
    kv_lora_rank: int  # R_kv (kv_lora_rank)
    rope_dim: int  # E_r (qk_rope_head_dim)
    nope_dim: int  # E_n (qk_nope_head_dim)
    v_dim: int  # E_v (v_head_dim)
    norm_eps: float = 1e-6  # the two latent RMSNorms


def mla_param_layout(spec, n: int) -> dict[str, ParamInfo]:
    """The attention leaves of `n` stacked layers (module docstring)."""
    m: MLASpec = spec.mla
    D, H, E = spec.hidden_size, spec.num_heads, spec.head_dim
    heads = ("layers", "lora", "heads", "head_dim")
    out: dict[str, Any] = {}
    if m.q_lora_rank:
        out["q_a"] = ParamInfo(shape=(n, D, m.q_lora_rank), axes=("layers", "embed", "lora"))
        out["q_a_norm"] = {"scale": ParamInfo(shape=(n, m.q_lora_rank), axes=("layers", "norm"))}
        out["q_b"] = ParamInfo(shape=(n, m.q_lora_rank, H, E), axes=heads)
    else:
        out["q"] = ParamInfo(shape=(n, D, H, E), axes=("layers", "embed", "heads", "head_dim"))
    out["kv_a"] = ParamInfo(shape=(n, D, m.kv_lora_rank), axes=("layers", "embed", "lora"))
    out["kv_a_norm"] = {"scale": ParamInfo(shape=(n, m.kv_lora_rank), axes=("layers", "norm"))}
    out["k_rope"] = ParamInfo(shape=(n, D, m.rope_dim), axes=("layers", "embed", "head_dim"))
    out["k_b"] = ParamInfo(shape=(n, m.kv_lora_rank, H, m.nope_dim), axes=heads)
    out["v_b"] = ParamInfo(shape=(n, m.kv_lora_rank, H, m.v_dim), axes=heads)
    out["o"] = ParamInfo(shape=(n, H, m.v_dim, D), axes=("layers", "heads", "head_dim", "embed"))
    return out


def mla_qkv(
    spec, p: dict[str, Any], x: Float["B T D"]
) -> tuple[Float["B T H E"], Float["B T H E"], Float["B T H E"]]:
    """q, k (rope part first, not yet rotated) and v (zero-padded to E) of one layer."""
    m: MLASpec = spec.mla
    q = _queries(spec, p, x)
    c, k_rope = _latent(spec, p, x)
    k_nope = dense(c, p["k_b"], "btr,rhe->bthe")  # [B, T, H, En]
    b, t, h, _ = k_nope.shape
    k = jnp.concatenate([jnp.broadcast_to(k_rope[:, :, None], (b, t, h, m.rope_dim)), k_nope], -1)
    v = dense(c, p["v_b"], "btr,rhe->bthe")  # [B, T, H, Ev]
    v = jnp.pad(v, [(0, 0), (0, 0), (0, 0), (0, spec.head_dim - m.v_dim)])
    return q, k, v


def latent_width(spec) -> int:
    """The features of the latent key / value a cache slot holds: E_r + R_kv."""
    return spec.mla.rope_dim + spec.mla.kv_lora_rank


def mla_latent_qkv(
    spec, p: dict[str, Any], x: Float["B T D"]
) -> tuple[Float["B T H W"], Float["B T 1 W"], Float["B T 1 W"]]:
    """The latent form (module docstring): per-head queries [q_r | W_kb q_n], one shared key
    [k_r | c] and one shared value [c | 0], W = E_r + R_kv features each (rope part first)."""
    m: MLASpec = spec.mla
    q = _queries(spec, p, x)
    q_rope, q_nope = q[..., : m.rope_dim], q[..., m.rope_dim :]
    q_latent = dense(q_nope, p["k_b"], "bthe,rhe->bthr")  # [B, T, H, R]: W_kb q_n
    c, k_rope = _latent(spec, p, x)
    key = jnp.concatenate([k_rope, c], -1)[:, :, None]  # [B, T, 1, W]
    value = jnp.pad(c, [(0, 0), (0, 0), (0, m.rope_dim)])[:, :, None]  # [B, T, 1, W]: [c | 0]
    return jnp.concatenate([q_rope, q_latent], -1), key, value


def mla_latent_output(spec, p: dict[str, Any], out: Float["B T H W"]) -> Float["B T D"]:
    """sum_s p_s c_s per head (the first R_kv features) through W_vb, then the output projection."""
    v = dense(out[..., : spec.mla.kv_lora_rank], p["v_b"], "bthr,rhe->bthe")  # [B, T, H, Ev]
    return dense(v, p["o"], "bthe,hed->btd")


def _latent(spec, p: dict[str, Any], x: Float["B T D"]) -> tuple[Float["B T Rkv"], Float["B T E'"]]:
    """The normed kv latent c and the rope key shared by all heads (not yet rotated)."""
    m: MLASpec = spec.mla
    c = norm(p["kv_a_norm"], dense(x, p["kv_a"], "btd,dr->btr"), kind="rms", eps=m.norm_eps)
    return c, dense(x, p["k_rope"], "btd,de->bte")


def _queries(spec, p: dict[str, Any], x: Float["B T D"]) -> Float["B T H E"]:
    m: MLASpec = spec.mla
    if m.q_lora_rank:
        c_q = norm(p["q_a_norm"], dense(x, p["q_a"], "btd,dr->btr"), kind="rms", eps=m.norm_eps)
        return dense(c_q, p["q_b"], "btr,rhe->bthe")
    return dense(x, p["q"], "btd,dhe->bthe")


def mla_output(spec, p: dict[str, Any], out: Float["B T H E"]) -> Float["B T D"]:
    """The output projection over the first E_v features of each head (the rest are zeros)."""
    return dense(out[..., : spec.mla.v_dim], p["o"], "bthe,hed->btd")


def mla_problems(spec) -> list[str]:
    """Problems of an MLA spec (for `ModelSpec.__post_init__`)."""
    m: MLASpec = spec.mla
    problems = []
    if spec.head_dim != m.rope_dim + m.nope_dim:
        problems.append(f"MLA head_dim {spec.head_dim} != rope {m.rope_dim} + nope {m.nope_dim}")
    if m.v_dim > spec.head_dim:
        problems.append(f"MLA v_dim {m.v_dim} > head_dim {spec.head_dim}")
    if spec.num_kv_heads != spec.num_heads:
        problems.append("MLA expands keys to every head: num_kv_heads must equal num_heads")
    return problems
