"""The canonical parameter tree of a `ModelSpec`: every leaf's shape and logical axes, in one place.

The loader fills this tree from a checkpoint, `init_params` fills it with random numbers (benchmarks,
sharding tests), `abstract_params` gives `jax.ShapeDtypeStruct`s for `jax.eval_shape`, and
`sharding.param_shardings` maps the logical axes to a mesh. Per-layer leaves are stacked on a
leading L axis so the decoder scans over layers:

    embed [V, D]            pos_embed [P, D] (learned positions)      lm_head [V, D] (untied)
    final_norm {scale [D], bias [D]?}
    layers/attn_norm?, mlp_norm?, post_attn_norm?, post_mlp_norm?   {scale [L, D], bias [L, D]?}
    layers/attn  q [L, D, H, E]  k, v [L, D, G, E]  o [L, H, E, D]
                 q_bias [L, H, E]  k_bias, v_bias [L, G, E]  o_bias [L, D]
                 q_norm, k_norm {scale [L, E]} (per head) or {scale [L, H|G, E]} (per_head, heads)
    layers/mlp   up [L, D, F]  gate [L, D, F] (gated)  down [L, F, D]  up_bias, gate_bias [L, F]  down_bias [L, D]
                 sinks [L, H] (gpt-oss attention sinks)
    layers/moe   the experts instead of the MLP (`experts.moe_param_layout`)
    layers/attn  MLA's latent projections instead of q, k, v (`mla.mla_param_layout`)
    dense_layers the first `spec.dense_layers` layers of an MoE model, with `mlp` (same keys)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxeval.models.experts import moe_param_layout
from jaxeval.models.mla import mla_param_layout
from jaxeval.models.param_info import ParamInfo, is_info

__all__ = ["ParamInfo", "abstract_params", "init_params", "is_info", "param_count", "param_layout"]


def _norm(spec, stacked: int | bool, width: int, width_axis: str = "norm") -> dict[str, ParamInfo]:
    """A norm's scale (and bias); `stacked` = the number of stacked layers (False: not stacked)."""
    lead = (int(stacked),) if stacked is not False else ()
    lead_axes = ("layers",) if stacked is not False else ()
    out = {"scale": ParamInfo(shape=(*lead, width), axes=(*lead_axes, width_axis))}
    if spec.norm == "layer":  # "layer_nobias" (Cohere) has a scale only
        out["bias"] = ParamInfo(shape=(*lead, width), axes=(*lead_axes, width_axis))
    return out


def param_layout(spec) -> dict[str, Any]:
    """The nested dict of `ParamInfo` for this model (keys as in the module docstring).

    A Mixture-of-Experts model whose first k layers keep the dense MLP (`spec.dense_layers`) has
    two stacks: `dense_layers` (layers 0..k-1, with `mlp`) and `layers` (k..L-1, with `moe`).
    """
    D, V, k = spec.hidden_size, spec.vocab_size, spec.dense_layers
    tree: dict[str, Any] = {
        "embed": ParamInfo(shape=(V, D), axes=("vocab", "embed")),
        "layers": layer_layout(spec, spec.num_layers - k, moe=spec.moe is not None),
        "final_norm": _norm(spec, False, D),
    }
    if k:
        tree["dense_layers"] = layer_layout(spec, k, moe=False)
    if spec.learned_positions:
        tree["pos_embed"] = ParamInfo(
            shape=(spec.max_position_embeddings, D), axes=("positions", "embed")
        )
    if not spec.tie_embeddings:
        tree["lm_head"] = ParamInfo(shape=(V, D), axes=("vocab", "embed"))
    return tree


def _attention_layout(spec, L: int) -> dict[str, Any]:
    if spec.mla is not None:
        return mla_param_layout(spec, L)
    D, H, G, E = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
    attn: dict[str, Any] = {
        "q": ParamInfo(shape=(L, D, H, E), axes=("layers", "embed", "heads", "head_dim")),
        "k": ParamInfo(shape=(L, D, G, E), axes=("layers", "embed", "kv_heads", "head_dim")),
        "v": ParamInfo(shape=(L, D, G, E), axes=("layers", "embed", "kv_heads", "head_dim")),
        "o": ParamInfo(shape=(L, H, E, D), axes=("layers", "heads", "head_dim", "embed")),
    }
    if spec.qkv_bias:
        attn["q_bias"] = ParamInfo(shape=(L, H, E), axes=("layers", "heads", "head_dim"))
        attn["k_bias"] = ParamInfo(shape=(L, G, E), axes=("layers", "kv_heads", "head_dim"))
        attn["v_bias"] = ParamInfo(shape=(L, G, E), axes=("layers", "kv_heads", "head_dim"))
    if spec.o_bias:
        attn["o_bias"] = ParamInfo(shape=(L, D), axes=("layers", "norm"))
    if spec.qk_norm == "head":
        attn["q_norm"] = _norm(spec, L, E, "head_dim")
        attn["k_norm"] = _norm(spec, L, E, "head_dim")
    elif spec.qk_norm in ("heads", "per_head"):  # scales kept as [L, H, E]: one norm over all
        # heads ("heads"), or one norm per head with its own scale ("per_head")
        attn["q_norm"] = {"scale": ParamInfo(shape=(L, H, E), axes=("layers", "heads", "head_dim"))}
        attn["k_norm"] = {
            "scale": ParamInfo(shape=(L, G, E), axes=("layers", "kv_heads", "head_dim"))
        }
    if spec.attn_sinks:
        attn["sinks"] = ParamInfo(shape=(L, H), axes=("layers", "heads"))
    return attn


def _mlp_layout(spec, L: int) -> dict[str, Any]:
    D, F = spec.hidden_size, spec.intermediate_size
    mlp: dict[str, Any] = {
        "up": ParamInfo(shape=(L, D, F), axes=("layers", "embed", "mlp")),
        "down": ParamInfo(shape=(L, F, D), axes=("layers", "mlp", "embed")),
    }
    if spec.mlp == "gated":
        mlp["gate"] = ParamInfo(shape=(L, D, F), axes=("layers", "embed", "mlp"))
    if spec.mlp_bias:
        mlp["up_bias"] = ParamInfo(shape=(L, F), axes=("layers", "mlp"))
        mlp["down_bias"] = ParamInfo(shape=(L, D), axes=("layers", "norm"))
        if spec.mlp == "gated":
            mlp["gate_bias"] = ParamInfo(shape=(L, F), axes=("layers", "mlp"))
    return mlp


def layer_layout(spec, L: int, *, moe: bool) -> dict[str, Any]:
    """One stack of `L` decoder layers: attention, norms, and the dense MLP or the experts."""
    D = spec.hidden_size
    layers: dict[str, Any] = {"attn": _attention_layout(spec, L)}
    if moe:
        layers["moe"] = moe_param_layout(spec.moe, D, L)
    else:
        layers["mlp"] = _mlp_layout(spec, L)
    if spec.residual != "post_norm":
        layers["attn_norm"] = _norm(spec, L, D)
        if spec.residual != "parallel_shared":  # Cohere, Falcon-7B: one norm feeds both
            layers["mlp_norm"] = _norm(spec, L, D)
    if spec.sandwich_norms or spec.residual == "post_norm":
        layers["post_attn_norm"] = _norm(spec, L, D)
        layers["post_mlp_norm"] = _norm(spec, L, D)
    return layers


def abstract_params(spec, dtype: Any = jnp.float32) -> dict[str, Any]:
    """`jax.ShapeDtypeStruct` leaves, for `jax.eval_shape` on full-size configs (no memory used)."""
    return jax.tree.map(
        lambda i: jax.ShapeDtypeStruct(i.shape, jnp.dtype(dtype)),
        param_layout(spec),
        is_leaf=is_info,
    )


def param_count(params: Any) -> int:
    """Total number of parameters in a pytree of arrays or ShapeDtypeStructs."""
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def init_params(
    spec, key: jax.Array, *, std: float = 0.2, dtype: Any = jnp.float32
) -> dict[str, Any]:
    """Random parameters in the canonical layout: normal(std) weights, norms near identity.

    Norm scales are 1 + N(0, 0.1) (or N(0, 0.1) for the (1 + w) norm) so activations stay O(1).
    """
    layout = param_layout(spec)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(layout, is_leaf=is_info)
    keys = jax.random.split(key, len(leaves))
    out = []
    for (path, info), k in zip(leaves, keys):
        names = [getattr(p, "key", "") for p in path]
        in_norm = any(str(n).endswith("norm") for n in names[:-1])
        if in_norm:
            noise = 0.1 * jax.random.normal(k, info.shape, jnp.float32)
            offset = 1.0 if names[-1] == "scale" and spec.norm != "rms_plus_one" else 0.0
            value = noise + offset
        else:
            value = std * jax.random.normal(k, info.shape, jnp.float32)
        out.append(value.astype(dtype))
    return jax.tree.unflatten(treedef, out)
