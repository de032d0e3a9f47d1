"""Where each canonical parameter lives in a Hugging Face checkpoint, and how to convert it.

A `Source` names the HF tensor (with `{i}` for the layer index of stacked leaves) and a `convert`
function from the HF layout of ONE layer's tensor to the canonical layout of that layer's slice
(`None` means identical layout, so the loader can read just the slice it needs). A convert with an
`into(w, dest) -> bool` method (`Transposed`) may write a layer straight into the loader's stacked
buffer instead. Examples, H = 2 heads of E = 3, D = 4:

    torch Linear q_proj.weight [H*E, D] = [6, 4]   --linear_heads(2, 3)-->  q [D, H, E] = [4, 2, 3]
    GPT-2 Conv1D c_attn.weight [D, 3*D]             --conv_heads(0, 4, 2, 3)--> columns 0:4 as [4, 2, 3]
    NeoX query_key_value.weight [H*3*E, D], rows per head [q0 k0 v0 q1 k1 v1] --neox_qkv(0, 2, 3)--> q
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

Convert = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    """One canonical leaf's origin: HF tensor name and HF -> canonical conversion.

    In the name, `{i}` is the layer (the stack's j-th layer is HF layer `first_layer + j`) and
    `{e}` the expert: a leaf [L, X, ...] of an MoE layer read expert by expert, `convert` applied
    to each expert's tensor.
    """

    key: str
    convert: Convert | None = None
    first_layer: int = 0


TRANSPOSE_ROWS = 64  # rows per strip in `transpose`


def transpose(w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A contiguous copy of the 2-D `w.T` (into `out` when given), written strip by strip.

    `np.ascontiguousarray(w.T)` walks one of the two arrays with a stride of a whole row, so a large
    matrix misses the cache on every element and dominates a checkpoint's load; copying 64 source
    rows at a time keeps both sides in cache (several times faster; docs/performance.md).
    """
    rows, cols = w.shape
    out = np.empty((cols, rows), w.dtype) if out is None else out
    for start in range(0, rows, TRANSPOSE_ROWS):
        out[:, start : start + TRANSPOSE_ROWS] = w[start : start + TRANSPOSE_ROWS].T
    return out


@dataclasses.dataclass(frozen=True)
class Transposed:
    """torch Linear [out, in] -> [in, out], then reshaped to `shape`, as a Convert; `into` writes
    the result straight into a preallocated contiguous slice (the loader's stacked shard), saving
    a temporary copy of every linear."""

    shape: tuple[int | str, ...]  # "in" / "out": that axis of the torch weight

    def __call__(self, w: np.ndarray) -> np.ndarray:
        return transpose(w).reshape(self._shape(w))

    def into(self, w: np.ndarray, dest: np.ndarray) -> bool:
        """Writes the conversion of `w` into `dest` (casting); False, untouched, if it can't."""
        if w.ndim != 2 or not dest.flags.c_contiguous:  # first: `_shape` reads w's two axes
            return False
        if dest.shape != self._shape(w) or w.size != dest.size:
            return False
        transpose(w, out=dest.reshape(w.shape[1], w.shape[0]))
        return True

    def _shape(self, w: np.ndarray) -> tuple[int, ...]:
        return tuple(
            w.shape[1] if d == "in" else w.shape[0] if d == "out" else d for d in self.shape
        )


linear = Transposed(("in", "out"))
"""torch Linear [out, in] -> [in, out]."""


def linear_heads(heads: int, dim: int) -> Convert:
    """torch Linear [heads*dim, in] -> [in, heads, dim]."""
    return Transposed(("in", heads, dim))


def linear_out_heads(heads: int, dim: int) -> Convert:
    """torch Linear [out, heads*dim] -> [heads, dim, out]."""
    return Transposed((heads, dim, "out"))


def split_heads(heads: int, dim: int) -> Convert:
    """bias [heads*dim] -> [heads, dim] (or Conv1D [heads*dim, out] -> [heads, dim, out])."""
    return lambda b: np.ascontiguousarray(b).reshape(heads, dim, *b.shape[1:])


def conv_heads(start: int, stop: int, heads: int, dim: int) -> Convert:
    """GPT-2 Conv1D [in, 3*D] columns start:stop -> [in, heads, dim]; bias [3*D] -> [heads, dim]."""

    def convert(w: np.ndarray) -> np.ndarray:
        part = np.ascontiguousarray(w[..., start:stop])
        return part.reshape(*w.shape[:-1], heads, dim)

    return convert


def neox_qkv(part: int, heads: int, dim: int) -> Convert:
    """NeoX fused [heads*3*dim, in] (per head: q, k, v) -> part's [in, heads, dim]; bias -> [heads, dim]."""

    def convert(w: np.ndarray) -> np.ndarray:
        if w.ndim == 1:
            return np.ascontiguousarray(w.reshape(heads, 3, dim)[:, part])
        return np.ascontiguousarray(
            w.reshape(heads, 3, dim, w.shape[1])[:, part].transpose(2, 0, 1)
        )

    return convert


def _norm(spec, weight: str, bias: str | None = None) -> dict[str, Source]:
    out = {"scale": Source(key=weight)}
    if spec.norm == "layer":
        out["bias"] = Source(key=bias or weight.replace(".weight", ".bias"))
    return out


def llama_like(spec) -> dict[str, Any]:
    """Llama, Mistral, Qwen2/3 and Gemma 1-3: `model.layers.{i}.self_attn.q_proj.weight`, ..."""
    H, G, E = spec.num_heads, spec.num_kv_heads, spec.head_dim
    layer = "model.layers.{i}."
    a = layer + "self_attn."
    attn: dict[str, Any] = {
        "q": Source(key=a + "q_proj.weight", convert=linear_heads(H, E)),
        "k": Source(key=a + "k_proj.weight", convert=linear_heads(G, E)),
        "v": Source(key=a + "v_proj.weight", convert=linear_heads(G, E)),
        "o": Source(key=a + "o_proj.weight", convert=linear_out_heads(H, E)),
    }
    if spec.qkv_bias:
        attn["q_bias"] = Source(key=a + "q_proj.bias", convert=split_heads(H, E))
        attn["k_bias"] = Source(key=a + "k_proj.bias", convert=split_heads(G, E))
        attn["v_bias"] = Source(key=a + "v_proj.bias", convert=split_heads(G, E))
    if spec.o_bias:
        attn["o_bias"] = Source(key=a + "o_proj.bias")
    if spec.qk_norm in ("head", "per_head"):  # [E], or Cohere's [H, E]: as stored
        attn["q_norm"] = _norm(spec, a + "q_norm.weight")
        attn["k_norm"] = _norm(spec, a + "k_norm.weight")
    elif spec.qk_norm == "heads":  # OLMo-2: one [H*E] scale -> [H, E]
        attn["q_norm"] = {"scale": Source(key=a + "q_norm.weight", convert=split_heads(H, E))}
        attn["k_norm"] = {"scale": Source(key=a + "k_norm.weight", convert=split_heads(G, E))}
    m = layer + "mlp."
    mlp: dict[str, Any] = {
        "gate": Source(key=m + "gate_proj.weight", convert=linear),
        "up": Source(key=m + "up_proj.weight", convert=linear),
        "down": Source(key=m + "down_proj.weight", convert=linear),
    }
    if spec.mlp_bias:
        for name in ("gate", "up", "down"):
            mlp[f"{name}_bias"] = Source(key=m + f"{name}_proj.bias")
    layers: dict[str, Any] = {"attn": attn, "mlp": mlp}
    if spec.residual == "post_norm":  # OLMo-2: only the two post-norms
        layers["post_attn_norm"] = _norm(spec, layer + "post_attention_layernorm.weight")
        layers["post_mlp_norm"] = _norm(spec, layer + "post_feedforward_layernorm.weight")
        return _llama_tree(spec, layers)
    layers["attn_norm"] = _norm(spec, layer + "input_layernorm.weight")
    if spec.residual == "parallel_shared":  # Cohere: one norm feeds attention and MLP
        return _llama_tree(spec, layers)
    if spec.sandwich_norms:  # Gemma-2/3 name their four norms differently from Llama's two
        layers["post_attn_norm"] = _norm(spec, layer + "post_attention_layernorm.weight")
        layers["mlp_norm"] = _norm(spec, layer + "pre_feedforward_layernorm.weight")
        layers["post_mlp_norm"] = _norm(spec, layer + "post_feedforward_layernorm.weight")
    else:
        layers["mlp_norm"] = _norm(spec, layer + "post_attention_layernorm.weight")
    return _llama_tree(spec, layers)


def _tree(
    spec, layers: dict[str, Any], *, embed: str, final_norm: str, lm_head: str = "lm_head.weight"
) -> dict[str, Any]:
    """The whole tree around `layers`: embeddings, final norm, and the head when untied."""
    tree = {"embed": Source(key=embed), "layers": layers, "final_norm": _norm(spec, final_norm)}
    if not spec.tie_embeddings:
        tree["lm_head"] = Source(key=lm_head)
    return tree


def _llama_tree(spec, layers: dict[str, Any]) -> dict[str, Any]:
    return _tree(spec, layers, embed="model.embed_tokens.weight", final_norm="model.norm.weight")


def rows(start: int, stop: int, then: Convert) -> Convert:
    """Rows start:stop of a fused torch Linear [out, in], then `then`."""
    return lambda w: then(w[start:stop])


def phi3(spec) -> dict[str, Any]:
    """Phi-3: Llama names, but fused `qkv_proj` rows [q | k | v] and `gate_up_proj` rows [gate | up]."""
    H, G, E, F = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.intermediate_size
    tree = llama_like(spec)
    a, m = "model.layers.{i}.self_attn.", "model.layers.{i}.mlp."
    qkv, q_end, k_end = a + "qkv_proj.weight", H * E, (H + G) * E
    tree["layers"]["attn"].update(
        q=Source(key=qkv, convert=rows(0, q_end, linear_heads(H, E))),
        k=Source(key=qkv, convert=rows(q_end, k_end, linear_heads(G, E))),
        v=Source(key=qkv, convert=rows(k_end, k_end + G * E, linear_heads(G, E))),
    )
    tree["layers"]["mlp"].update(
        gate=Source(key=m + "gate_up_proj.weight", convert=rows(0, F, linear)),
        up=Source(key=m + "gate_up_proj.weight", convert=rows(F, 2 * F, linear)),
    )
    return tree


def gpt2(spec) -> dict[str, Any]:
    """GPT-2: Conv1D weights stored [in, out]; fused c_attn columns [q | k | v]."""
    H, E, D = spec.num_heads, spec.head_dim, spec.hidden_size
    h = "transformer.h.{i}."
    c_attn, c_bias = h + "attn.c_attn.weight", h + "attn.c_attn.bias"
    tree = {
        "embed": Source(key="transformer.wte.weight"),
        "pos_embed": Source(key="transformer.wpe.weight"),
        "final_norm": _norm(spec, "transformer.ln_f.weight"),
        "layers": {
            "attn_norm": _norm(spec, h + "ln_1.weight"),
            "mlp_norm": _norm(spec, h + "ln_2.weight"),
            "attn": {
                "q": Source(key=c_attn, convert=conv_heads(0, D, H, E)),
                "k": Source(key=c_attn, convert=conv_heads(D, 2 * D, H, E)),
                "v": Source(key=c_attn, convert=conv_heads(2 * D, 3 * D, H, E)),
                "q_bias": Source(key=c_bias, convert=conv_heads(0, D, H, E)),
                "k_bias": Source(key=c_bias, convert=conv_heads(D, 2 * D, H, E)),
                "v_bias": Source(key=c_bias, convert=conv_heads(2 * D, 3 * D, H, E)),
                "o": Source(key=h + "attn.c_proj.weight", convert=split_heads(H, E)),
                "o_bias": Source(key=h + "attn.c_proj.bias"),
            },
            "mlp": {
                "up": Source(key=h + "mlp.c_fc.weight"),
                "up_bias": Source(key=h + "mlp.c_fc.bias"),
                "down": Source(key=h + "mlp.c_proj.weight"),
                "down_bias": Source(key=h + "mlp.c_proj.bias"),
            },
        },
    }
    if not spec.tie_embeddings:
        tree["lm_head"] = Source(key="lm_head.weight")
    return tree


def gpt_neox(spec) -> dict[str, Any]:
    """GPT-NeoX / Pythia: fused query_key_value laid out per head, untied `embed_out`."""
    H, E = spec.num_heads, spec.head_dim
    layer = "gpt_neox.layers.{i}."
    qkv, qkv_bias = (
        layer + "attention.query_key_value.weight",
        layer + "attention.query_key_value.bias",
    )
    attn: dict[str, Any] = {
        "q": Source(key=qkv, convert=neox_qkv(0, H, E)),
        "k": Source(key=qkv, convert=neox_qkv(1, H, E)),
        "v": Source(key=qkv, convert=neox_qkv(2, H, E)),
        "o": Source(key=layer + "attention.dense.weight", convert=linear_out_heads(H, E)),
    }
    if spec.qkv_bias:
        attn["q_bias"] = Source(key=qkv_bias, convert=neox_qkv(0, H, E))
        attn["k_bias"] = Source(key=qkv_bias, convert=neox_qkv(1, H, E))
        attn["v_bias"] = Source(key=qkv_bias, convert=neox_qkv(2, H, E))
    if spec.o_bias:
        attn["o_bias"] = Source(key=layer + "attention.dense.bias")
    tree = {
        "embed": Source(key="gpt_neox.embed_in.weight"),
        "final_norm": _norm(spec, "gpt_neox.final_layer_norm.weight"),
        "layers": {
            "attn_norm": _norm(spec, layer + "input_layernorm.weight"),
            "mlp_norm": _norm(spec, layer + "post_attention_layernorm.weight"),
            "attn": attn,
            "mlp": {
                "up": Source(key=layer + "mlp.dense_h_to_4h.weight", convert=linear),
                "up_bias": Source(key=layer + "mlp.dense_h_to_4h.bias"),
                "down": Source(key=layer + "mlp.dense_4h_to_h.weight", convert=linear),
                "down_bias": Source(key=layer + "mlp.dense_4h_to_h.bias"),
            },
        },
    }
    if not spec.tie_embeddings:
        tree["lm_head"] = Source(key="embed_out.weight")
    return tree


def then(first: Convert | None, second: Convert) -> Convert:
    """`second(first(w))` (`first` None: the identity)."""
    if first is None:
        return second
    return lambda w: second(first(w))


def deinterleave(rotary_dim: int) -> Convert:
    """Reorders the last axis (a head's features) from interleaved rope pairs to rotate-half halves.

    Interleaved rope (Cohere, GGUF-style) rotates the pairs (2i, 2i + 1) by angle i; rotate-half
    rope (ours) rotates (i, i + E'/2). The same permutation of q's and k's head features,
    [0, 2, 4, ..., 1, 3, 5, ...], turns one into the other and leaves every q.k unchanged, so the
    checkpoint's q/k projections (and their biases and per-head norms) are permuted once at load
    time and the decoder runs its one rope.
    """
    order = [*range(0, rotary_dim, 2), *range(1, rotary_dim, 2)]

    def convert(w: np.ndarray) -> np.ndarray:
        perm = order + list(range(rotary_dim, w.shape[-1]))
        return np.ascontiguousarray(w[..., perm])

    return convert


def cohere(spec) -> dict[str, Any]:
    """Cohere 1-2: Llama names, one input norm, interleaved rope (q/k features reordered here)."""
    tree = llama_like(spec)
    attn = tree["layers"]["attn"]
    fix = deinterleave(spec.rotary_dim)
    for name in ("q", "k", "q_bias", "k_bias"):
        if name in attn:
            attn[name] = dataclasses.replace(attn[name], convert=then(attn[name].convert, fix))
    for name in ("q_norm", "k_norm"):
        if name in attn:
            attn[name] = {
                key: dataclasses.replace(src, convert=then(src.convert, fix))
                for key, src in attn[name].items()
            }
    return tree


def starcoder2(spec) -> dict[str, Any]:
    """Starcoder2: Llama attention names with biases, LayerNorms, a plain `c_fc` / `c_proj` MLP."""
    tree = llama_like(spec)
    m = "model.layers.{i}.mlp."
    mlp: dict[str, Any] = {
        "up": Source(key=m + "c_fc.weight", convert=linear),
        "down": Source(key=m + "c_proj.weight", convert=linear),
    }
    if spec.mlp_bias:
        mlp["up_bias"] = Source(key=m + "c_fc.bias")
        mlp["down_bias"] = Source(key=m + "c_proj.bias")
    tree["layers"]["mlp"] = mlp
    return tree


def falcon_qkv(part: int, heads: int, kv_heads: int, dim: int) -> Convert:
    """Falcon's fused `query_key_value` [rows, in] (or its bias [rows]) -> part's [in, n, dim]
    (part 0 = q, 1 = k, 2 = v). Rows come per kv group: its X = H / G query heads, then its key,
    then its value. That one rule covers Falcon's three layouts: new_decoder_architecture (G
    groups), multi_query (G = 1: H queries, one k, one v) and the per-head q, k, v of the original
    (G = H: X = 1)."""
    x = heads // kv_heads

    def convert(w: np.ndarray) -> np.ndarray:
        grouped = w.reshape(kv_heads, x + 2, dim, *w.shape[1:])
        out = grouped[:, :x] if part == 0 else grouped[:, x + part - 1 : x + part]
        out = out.reshape(-1, dim, *w.shape[1:])  # (heads, dim, in) or (heads, dim)
        return np.ascontiguousarray(out.transpose(2, 0, 1) if out.ndim == 3 else out)

    return convert


def falcon(spec) -> dict[str, Any]:
    """Falcon: `transformer.h.{i}.self_attention.query_key_value` (three layouts), LayerNorms named
    by variant (`ln_attn` / `ln_mlp`, or `input_layernorm` [+ `post_attention_layernorm`])."""
    H, G, E = spec.num_heads, spec.num_kv_heads, spec.head_dim
    h = "transformer.h.{i}."
    qkv = h + "self_attention.query_key_value.weight"
    qkv_bias = h + "self_attention.query_key_value.bias"
    attn: dict[str, Any] = {
        "q": Source(key=qkv, convert=falcon_qkv(0, H, G, E)),
        "k": Source(key=qkv, convert=falcon_qkv(1, H, G, E)),
        "v": Source(key=qkv, convert=falcon_qkv(2, H, G, E)),
        "o": Source(key=h + "self_attention.dense.weight", convert=linear_out_heads(H, E)),
    }
    if spec.qkv_bias:
        attn["q_bias"] = Source(key=qkv_bias, convert=falcon_qkv(0, H, G, E))
        attn["k_bias"] = Source(key=qkv_bias, convert=falcon_qkv(1, H, G, E))
        attn["v_bias"] = Source(key=qkv_bias, convert=falcon_qkv(2, H, G, E))
    if spec.o_bias:
        attn["o_bias"] = Source(key=h + "self_attention.dense.bias")
    mlp: dict[str, Any] = {
        "up": Source(key=h + "mlp.dense_h_to_4h.weight", convert=linear),
        "down": Source(key=h + "mlp.dense_4h_to_h.weight", convert=linear),
    }
    if spec.mlp_bias:
        mlp["up_bias"] = Source(key=h + "mlp.dense_h_to_4h.bias")
        mlp["down_bias"] = Source(key=h + "mlp.dense_4h_to_h.bias")
    layers: dict[str, Any] = {"attn": attn, "mlp": mlp}
    if spec.residual == "parallel":  # two norms in parallel (Falcon-40B/180B)
        layers["attn_norm"] = _norm(spec, h + "ln_attn.weight")
        layers["mlp_norm"] = _norm(spec, h + "ln_mlp.weight")
    else:
        layers["attn_norm"] = _norm(spec, h + "input_layernorm.weight")
        if spec.residual == "sequential":
            layers["mlp_norm"] = _norm(spec, h + "post_attention_layernorm.weight")
    return _tree(
        spec,
        layers,
        embed="transformer.word_embeddings.weight",
        final_norm="transformer.ln_f.weight",
    )


def every_other(first: int) -> Convert:
    """Features first, first + 2, ... of the last axis (gpt-oss's interleaved gate/up columns)."""
    return lambda w: np.ascontiguousarray(w[..., first::2])


def swap_last(w: np.ndarray) -> np.ndarray:
    """[X, a, b] -> [X, b, a] (fused experts stored as torch Linear weights, one per expert)."""
    return np.ascontiguousarray(np.swapaxes(w, -1, -2))


def _first_layer(tree: Any, first: int) -> Any:
    """Every `{i}` source of `tree` read from HF layer `first + j` for the stack's j-th layer."""
    if isinstance(tree, Source):
        return dataclasses.replace(tree, first_layer=first) if "{i}" in tree.key else tree
    return {name: _first_layer(sub, first) for name, sub in tree.items()}


def _experts(prefix: str, names: dict[str, str]) -> dict[str, Source]:
    """Per-expert torch Linear weights `prefix.experts.{e}.<name>.weight` -> gate/up [D, F] and
    down [F, D] for every expert."""
    return {
        ours: Source(key=f"{prefix}experts.{{e}}.{theirs}.weight", convert=linear)
        for ours, theirs in names.items()
    }


def moe(spec) -> dict[str, Any]:
    """The MoE families: the attention and norms of `llama_like` (or `mla_attention`) with the
    experts of each family's checkpoint names, and the dense first layers when there are some."""
    m = spec.moe
    tree = llama_like(spec) if spec.mla is None else _mla_tree(spec)
    layer = "model.layers.{i}."
    t = spec.model_type
    if t == "mixtral":
        b = layer + "block_sparse_moe."
        experts = {
            "router": Source(key=b + "gate.weight", convert=linear),
            **_experts(b, {"gate": "w1", "up": "w3", "down": "w2"}),
        }
    elif t == "granitemoe":
        b, f = layer + "block_sparse_moe.", m.expert_size
        gate_up = b + "input_linear.weight"  # (Nx, 2 Fx, D): rows gate, then up
        experts = {
            "router": Source(key=b + "router.layer.weight", convert=linear),
            "gate": Source(key=gate_up, convert=lambda w: swap_last(w[:, :f])),
            "up": Source(key=gate_up, convert=lambda w: swap_last(w[:, f:])),
            "down": Source(key=b + "output_linear.weight", convert=swap_last),
        }
    elif t == "gpt_oss":
        b = layer + "mlp."
        experts = {
            "router": Source(key=b + "router.weight", convert=linear),
            "router_bias": Source(key=b + "router.bias"),
            # (Nx, D, 2 Fx) with gate and up interleaved column by column
            "gate": Source(key=b + "experts.gate_up_proj", convert=every_other(0)),
            "up": Source(key=b + "experts.gate_up_proj", convert=every_other(1)),
            "down": Source(key=b + "experts.down_proj"),
            "gate_bias": Source(key=b + "experts.gate_up_proj_bias", convert=every_other(0)),
            "up_bias": Source(key=b + "experts.gate_up_proj_bias", convert=every_other(1)),
            "down_bias": Source(key=b + "experts.down_proj_bias"),
        }
    else:  # qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, glm4_moe
        b = layer + "mlp."
        experts = {
            "router": Source(key=b + "gate.weight", convert=linear),
            **_experts(b, {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}),
        }
        if m.correction_bias:
            experts["correction_bias"] = Source(key=b + "gate.e_score_correction_bias")
        if m.shared_size:
            shared = b + ("shared_expert." if t == "qwen2_moe" else "shared_experts.")
            experts["shared"] = {
                name: Source(key=shared + f"{name}_proj.weight", convert=linear)
                for name in ("gate", "up", "down")
            }
        if m.shared_gate:
            experts["shared_gate"] = Source(key=b + "shared_expert_gate.weight", convert=linear)
    if spec.attn_sinks:
        tree["layers"]["attn"]["sinks"] = Source(key=layer + "self_attn.sinks")
    layers = tree["layers"]
    expert_layers = {name: sub for name, sub in layers.items() if name != "mlp"}
    expert_layers["moe"] = experts
    tree["layers"] = _first_layer(expert_layers, spec.dense_layers)
    if spec.dense_layers:
        tree["dense_layers"] = layers  # `mlp` under the Llama names, HF layers 0..k-1
    return tree


def _mla_tree(spec) -> dict[str, Any]:
    """DeepSeek-V2/V3: `llama_like`'s norms and MLP with the latent attention's projections
    (`jaxeval.models.mla`): heads reordered rope part first, the rope features de-interleaved."""
    m = spec.mla
    H, En, Er, Ev, R = spec.num_heads, m.nope_dim, m.rope_dim, m.v_dim, m.kv_lora_rank
    a = "model.layers.{i}.self_attn."
    order = deinterleave(Er)

    def q_heads(w: np.ndarray) -> np.ndarray:  # torch (H (En + E'), D) -> [D, H, E'+En]
        q = transpose(w).reshape(w.shape[1], H, En + Er)
        return np.ascontiguousarray(np.concatenate([order(q[..., En:]), q[..., :En]], -1))

    def kv_b(part: int) -> Convert:  # (H (En + Ev), Rkv) -> k_b [Rkv, H, En] or v_b [Rkv, H, Ev]
        def convert(w: np.ndarray) -> np.ndarray:
            kv = transpose(w).reshape(R, H, En + Ev)
            return np.ascontiguousarray(kv[..., :En] if part == 0 else kv[..., En:])

        return convert

    kv_a = a + "kv_a_proj_with_mqa.weight"  # rows [latent R | rope key Er]
    attn: dict[str, Any] = {
        "kv_a": Source(key=kv_a, convert=rows(0, R, linear)),
        "k_rope": Source(key=kv_a, convert=rows(R, R + Er, then(linear, order))),
        "kv_a_norm": {"scale": Source(key=a + "kv_a_layernorm.weight")},
        "k_b": Source(key=a + "kv_b_proj.weight", convert=kv_b(0)),
        "v_b": Source(key=a + "kv_b_proj.weight", convert=kv_b(1)),
        "o": Source(key=a + "o_proj.weight", convert=linear_out_heads(H, Ev)),
    }
    if m.q_lora_rank:
        attn["q_a"] = Source(key=a + "q_a_proj.weight", convert=linear)
        attn["q_a_norm"] = {"scale": Source(key=a + "q_a_layernorm.weight")}
        attn["q_b"] = Source(key=a + "q_b_proj.weight", convert=q_heads)
    else:
        attn["q"] = Source(key=a + "q_proj.weight", convert=q_heads)
    tree = llama_like(dataclasses.replace(spec, qk_norm=None, qkv_bias=False, o_bias=False))
    tree["layers"]["attn"] = attn
    return tree


# Alternative spellings of the same tensor in other exports: tried in order when a key is missing.
KEY_ALIASES: dict[str, tuple[tuple[str, str], ...]] = {
    "llama_like": (
        ("model.", ""),
        ("model.", "model.language_model."),
        ("model.", "language_model.model."),
    ),
    "gpt2": (("transformer.", ""),),
    "gpt_neox": (("gpt_neox.", ""),),
    "falcon": (("transformer.", ""),),
}
