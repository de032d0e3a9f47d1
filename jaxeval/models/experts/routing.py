"""The router: each token's K experts and their weights, as transformers' routers compute them.

The routing of one token, Nx = 4, Kx = 2:

    logits        [1.0, 3.0, 0.5, 2.0]
    scores        softmax -> [0.085, 0.631, 0.052, 0.232]   (or sigmoid; families below)
    experts       top_k   -> [1, 3]    weights [0.631, 0.232], renormalised [0.731, 0.269]

Routing per family (HF's `*TopKRouter` / `*TopkRouter` classes; every cast is HF's):

    mixtral               softmax(float32(logits in x's dtype)) -> top-k -> renormalise; weights
                          stay float32
    qwen2_moe, qwen3_moe, softmax in float32 -> top-k -> renormalise if `norm_topk_prob`; weights
    olmoe                 cast back to x's dtype. qwen2_moe adds sigmoid(x G) * shared(x)
    granitemoe            top-k of float32(logits) -> softmax over the K; weights in x's dtype
    gpt_oss               logits with a bias -> top-k -> softmax over the K, in x's dtype; experts
                          with biases, interleaved gate/up and the clamped SwiGLU `reference.gpt_oss_glu`
    deepseek_v2           logits from float32 x and weights; softmax; greedy top-k, or
                          ("group_limited_greedy") the best `topk_group` of `n_group` groups by
                          their max score, the rest zeroed; weights * routed_scaling_factor,
                          float32, never renormalised (HF ignores `norm_topk_prob`); shared experts
    deepseek_v3, glm4_moe logits from float32; sigmoid; experts chosen on scores + correction
                          bias, groups ranked by the sum of their two best corrected scores, the
                          rest -inf; weights the uncorrected scores, renormalised (+ 1e-20)
                          if `norm_topk_prob`, * routed_scaling_factor, float32; shared experts
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models.experts.spec import MoESpec
from jaxeval.models.layers import HIGHEST
from jaxeval.shapes import Float, Int


def router_logits(p: dict[str, Any], x: Float["B*T D"], *, moe: MoESpec) -> Float["B*T Nx"]:
    """The router's logits as HF computes them, returned in float32: rounded once to x's dtype
    (`router_dtype` "hidden", bias included as in torch's fused addmm) or from float32 x and
    weights ("float32")."""
    compute = x.dtype if moe.router_dtype == "hidden" else jnp.float32
    logits = jnp.einsum(
        "nd,dx->nx",
        x.astype(compute),
        p["router"].astype(compute),
        precision=HIGHEST,
        preferred_element_type=jnp.float32,
    )
    if moe.router_bias:
        logits = logits + p["router_bias"].astype(compute).astype(jnp.float32)
    return logits.astype(compute).astype(jnp.float32)


def _group_keep(choice: Float["B*T Nx"], moe: MoESpec) -> jax.Array:
    """bool [B*T, Nx]: the experts of each token's best `topk_group` groups."""
    n, x = choice.shape
    grouped = choice.reshape(n, moe.n_group, x // moe.n_group)
    if moe.group_score == "max":
        group_scores = grouped.max(axis=-1)  # one score per group
    else:
        group_scores = jax.lax.top_k(grouped, 2)[0].sum(axis=-1)
    best = jax.lax.top_k(group_scores, moe.topk_group)[1]  # each token's best groups
    keep = (best[:, :, None] == jnp.arange(moe.n_group)).any(axis=1)  # per token and group
    return jnp.repeat(keep, x // moe.n_group, axis=1)


def route(
    logits: Float["B*T Nx"], p: dict[str, Any], moe: MoESpec
) -> tuple[Float["B*T Kx"], Int["B*T Kx"]]:
    """(weights float32 [B*T, Kx], experts int32 [B*T, Kx]) from float32 router logits, as HF's
    router for the family (module docstring). Equal scores go to the lower expert index
    (`jax.lax.top_k`); torch's partial sort breaks exact ties its own way."""
    if moe.order == "topk_then_softmax":
        top, experts = jax.lax.top_k(logits, moe.top_k)
        return jax.nn.softmax(top, axis=-1), experts
    if moe.scoring == "softmax":
        scores = jax.nn.softmax(logits, axis=-1)
    else:
        scores = jax.nn.sigmoid(logits)
    choice = scores
    if moe.correction_bias:
        choice = scores + p["correction_bias"].astype(jnp.float32)
    if moe.grouped:
        fill = 0.0 if moe.group_score == "max" else -jnp.inf
        choice = jnp.where(_group_keep(choice, moe), choice, fill)
    weights, experts = jax.lax.top_k(choice, moe.top_k)
    if moe.correction_bias or moe.group_score == "top2_sum":
        # deepseek_v3 / glm4_moe: the uncorrected, unmasked scores (deepseek_v2: the masked ones)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
    if moe.norm_topk_prob:
        eps = 1e-20 if moe.scoring == "sigmoid" else 0.0  # deepseek_v3 / glm4_moe add 1e-20
        weights = weights / (weights.sum(axis=-1, keepdims=True) + eps)
    return weights * moe.routed_scaling_factor, experts
