"""`ModelSpec`: what a model is (what its config.json says), hashable, with its pure functions as
methods.

A spec is passed to `jax.jit` as a static argument, so it holds only hashable values (ints, strings,
tuples, frozen dataclasses) and no arrays. It is architecture only: how the model runs on its
devices (the mesh, the attention and expert backends) is a `jaxeval.models.runtime.Runtime`, the
keyword `runtime` of the methods that run layers. Its methods are pure functions of `params`
(nothing is captured from an object), thin wrappers over `decoder.py`:

    spec.hidden(params, tokens, positions, segment, parent, *, runtime) -> [B, T, D]  (final norm
        included; keyword `attention_block`: 0 = dense attention, Q = blocks of Q; default by
        row length)
    spec.head_weight(params) -> [V, D];  spec.finalize_logits(logits);  spec.head(params, h) -> [..., V]
    spec.init_cache(batch, length, dtype) -> KVCache
    spec.forward_cached(params, cache, tokens, positions, valid, index, *, runtime)
        -> ([B, T, D], KVCache)
        (the cache is updated in place and only slots [0, index + T) are read: use it per decode step)

Per-layer tuples (`sliding_window`, `attn_scale`, `rope`) have exactly `num_layers` entries;
`sliding_window` 0 means global attention on that layer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax

from jaxeval.models import decoder
from jaxeval.models import mla as mla_lib
from jaxeval.models import params as params_lib
from jaxeval.models.contract import Capabilities, KVCache
from jaxeval.models.experts import MoESpec
from jaxeval.models.layers import ACTIVATIONS, MLP_KINDS, NORM_KINDS
from jaxeval.models.mla import MLASpec
from jaxeval.models.rope import DynamicRope, LayerRope

COMPUTE_DTYPES = ("float32", "bfloat16", "float16")
RESIDUAL_KINDS = ("sequential", "parallel", "parallel_shared", "post_norm")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The static description of a decoder-only LM (dimension names of `jaxeval.shapes` in comments)."""

    # what the run may rely on (`contract.Capabilities`); a class attribute, not a field
    capabilities: ClassVar[Capabilities] = Capabilities(
        backends=True, kv_cache=True, per_row_cache_index=True, layout=True
    )
    model_type: str
    vocab_size: int  # V
    hidden_size: int  # D
    num_layers: int  # L
    num_heads: int  # H
    num_kv_heads: int  # G
    head_dim: int  # E
    intermediate_size: int  # F
    max_position_embeddings: int
    norm: str  # one of NORM_KINDS
    norm_eps: float
    mlp: str  # one of MLP_KINDS
    activation: str  # a key of layers.ACTIVATIONS
    sliding_window: tuple[int, ...]  # [L], 0 = global
    attn_scale: tuple[float, ...]  # [L], multiplies q.k
    tie_embeddings: bool
    rope: tuple[LayerRope, ...] = ()  # [L]; empty with learned positions or dynamic rope
    dynamic_rope: DynamicRope | None = None
    learned_positions: bool = False
    # q/k norms: "head" over E with one [E] scale (Qwen3, Gemma-3, EXAONE-4); "per_head" over E with
    # an [H, E] scale (Cohere); "heads" over all H*E features (OLMo-2/3)
    qk_norm: str | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    # "sequential"; "parallel" (GPT-NeoX, Falcon-40B: x + attn(n1 x) + mlp(n2 x)); "parallel_shared"
    # (Cohere, Falcon-7B: one norm feeds both); "post_norm" (OLMo-2, EXAONE-4: no pre-norms)
    residual: str = "sequential"
    residual_scale: float | None = None  # Granite: x + h * residual_multiplier
    logit_scale: float | None = (
        None  # logits times this (Cohere logit_scale, Granite 1/logits_scaling)
    )
    rope_layers: tuple[bool, ...] = ()  # [L] rope applied on that layer; () = on every rope layer
    sandwich_norms: bool = False  # Gemma-2/3 post-attention and post-MLP norms
    attn_softcap: float | None = None
    final_softcap: float | None = None
    embed_scale: float | None = None  # Gemma: sqrt(D)
    compute_dtype: str = "float32"
    # Mixture of Experts (`jaxeval.models.experts`): the feed-forward of every layer after the first
    # `dense_layers` (DeepSeek / GLM-4.5 `first_k_dense_replace`), which keep the dense MLP
    moe: MoESpec | None = None
    dense_layers: int = 0
    mla: MLASpec | None = None  # DeepSeek's multi-head latent attention (`jaxeval.models.mla`)
    attn_sinks: bool = False  # gpt-oss: a learned logit per head in every softmax's denominator

    def __post_init__(self):
        L = self.num_layers
        problems = []
        if self.norm not in NORM_KINDS:
            problems.append(f"norm {self.norm!r} not in {NORM_KINDS}")
        if self.mlp not in MLP_KINDS:
            problems.append(f"mlp {self.mlp!r} not in {MLP_KINDS}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation {self.activation!r} not in {sorted(ACTIVATIONS)}")
        if self.residual not in RESIDUAL_KINDS:
            problems.append(f"residual {self.residual!r} not in {RESIDUAL_KINDS}")
        if self.qk_norm not in (None, "head", "per_head", "heads"):
            problems.append(f"qk_norm {self.qk_norm!r} not None, 'head', 'per_head' or 'heads'")
        if self.num_heads % self.num_kv_heads:
            problems.append(
                f"{self.num_heads} heads not a multiple of {self.num_kv_heads} kv heads"
            )
        if self.compute_dtype not in COMPUTE_DTYPES:
            problems.append(f"compute_dtype {self.compute_dtype!r} not in {COMPUTE_DTYPES}")
        for name in ("sliding_window", "attn_scale"):
            if len(getattr(self, name)) != L:
                problems.append(f"{name} has {len(getattr(self, name))} entries for {L} layers")
        if self.rope_layers and len(self.rope_layers) != L:
            problems.append(f"rope_layers has {len(self.rope_layers)} entries for {L} layers")
        if self.rope and len(self.rope) != L:
            problems.append(f"rope has {len(self.rope)} entries for {L} layers")
        if self.dense_layers and (self.moe is None or not 0 < self.dense_layers < L):
            problems.append(f"dense_layers {self.dense_layers} needs moe and fewer than {L} layers")
        if self.mla is not None:
            problems.extend(mla_lib.mla_problems(self))
        if problems:
            raise ValueError("invalid ModelSpec: " + "; ".join(problems))

    @property
    def cache_heads(self) -> int:
        """G of the KV cache: the kv heads, or 1 for MLA's shared latent (`mla.py`)."""
        return 1 if self.mla is not None else self.num_kv_heads

    @property
    def cache_head_dim(self) -> int:
        """E of the KV cache: the head dim, or MLA's latent width E_r + R_kv."""
        return mla_lib.latent_width(self) if self.mla is not None else self.head_dim

    @property
    def rotary_dim(self) -> int:
        """E': the number of rotated features per head (0 without rope)."""
        if self.dynamic_rope is not None:
            return self.dynamic_rope.dim
        return 2 * len(self.rope[0].inv_freq) if self.rope else 0

    # ---- the model's pure functions -------------------------------------------------------
    # The decoder's functions take the spec first, so they are its methods as they stand
    # (`jaxeval.models.contract.DecoderModel` is the contract they meet):
    hidden = decoder.hidden  # (params, tokens, positions, segment, parent, *, runtime, ...)
    head_weight = decoder.head_weight  # (params) -> [V, D]
    finalize_logits = decoder.finalize_logits  # soft-capping (Gemma 2), else the identity
    head = decoder.head  # (params, h[..., D]) -> [..., V]
    forward_cached = decoder.forward_cached  # (params, cache, tokens, positions, valid, index, *,
    #                                            runtime)
    forward_new = (
        decoder.forward_new
    )  # (params, prefix, tokens, positions, valid, start, *, runtime)

    def init_cache(self, batch: int, length: int, dtype: Any = None) -> KVCache:
        return decoder.init_cache(self, batch, length, dtype or self.compute_dtype)

    # ---- parameters -----------------------------------------------------------------------
    def param_layout(self) -> dict[str, Any]:
        return params_lib.param_layout(self)

    def abstract_params(self, dtype: Any = "float32") -> dict[str, Any]:
        return params_lib.abstract_params(self, dtype)

    def init_params(self, key: jax.Array, *, std: float = 0.2, dtype: Any = "float32") -> Any:
        return params_lib.init_params(self, key, std=std, dtype=dtype)

    def param_count(self, params: Any = None) -> int:
        """Parameters in `params`, or in this spec's layout when `params` is None."""
        return params_lib.param_count(self.abstract_params() if params is None else params)

    def active_param_count(self, params: Any = None) -> int:
        """Parameters one token multiplies by: all of them, except that a Mixture of Experts'
        routed experts count K of X (every expert is still resident: `param_count` is what
        memory holds)."""
        total = self.param_count(params)
        if self.moe is None:
            return total
        m = self.moe
        routed = (self.num_layers - self.dense_layers) * m.num_experts * 3 * self.hidden_size
        routed *= m.expert_size
        return total - routed + routed * m.top_k // m.num_experts

    def body_param_count(self, params: Any = None, *, active: bool = False) -> int:
        """Parameters outside the embedding table and the LM head (the one definition of the
        non-embedding count): every expert, or with `active` the routed experts K of X."""
        total = self.active_param_count(params) if active else self.param_count(params)
        embed = self.vocab_size * self.hidden_size
        return total - embed - (0 if self.tie_embeddings else embed)
