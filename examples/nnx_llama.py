"""A small Llama written in Flax nnx, the model `train_and_evaluate.py` trains and the notebook uses.

Its arithmetic is Hugging Face's `LlamaForCausalLM` (RMSNorm in float32, rotate-half rope, grouped
query attention, SwiGLU MLP, untied head), so `save_hf_checkpoint` writes weights that both
transformers and `jaxeval run --model_args pretrained=DIR` read back; the tests compare the in-memory
path with that checkpoint path request for request.

    model = NnxLlama(LlamaConfig(vocab_size=512), rngs=nnx.Rngs(0))
    lm = jaxeval.InMemoryLM.from_nnx(model, tokenizer=tok, max_length=256,
                                     hidden=NnxLlama.hidden, head_weight=NnxLlama.head_weight)

The weights are one flat dict of arrays (layers stacked on a leading L axis), shared by the nnx
module and the pure functions below:

    embed [V, D]   wq [L, D, H*E]   wk, wv [L, D, G*E]   wo [L, H*E, D]   attn_norm, mlp_norm [L, D]
    w_gate, w_up [L, D, F]   w_down [L, F, D]   final_norm [D]   lm_head [V, D]
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxeval.inmemory import attention_mask

NAMES = (
    "embed",
    "wq",
    "wk",
    "wv",
    "wo",
    "attn_norm",
    "mlp_norm",
    "w_gate",
    "w_up",
    "w_down",
    "final_norm",
    "lm_head",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    vocab_size: int  # V
    hidden_size: int = 64  # D
    num_layers: int = 2  # L
    num_heads: int = 4  # H
    num_kv_heads: int = 2  # G
    intermediate_size: int = 128  # F
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:  # E
        return self.hidden_size // self.num_heads


def weight_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    L, D, F, V = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {
        "embed": (V, D),
        "wq": (L, D, q),
        "wk": (L, D, kv),
        "wv": (L, D, kv),
        "wo": (L, q, D),
        "attn_norm": (L, D),
        "mlp_norm": (L, D),
        "w_gate": (L, D, F),
        "w_up": (L, D, F),
        "w_down": (L, F, D),
        "final_norm": (D,),
        "lm_head": (V, D),
    }


def init_weights(cfg: LlamaConfig, seed: int = 0, std: float = 0.05) -> dict[str, jax.Array]:
    """Normal(std) matrices, norm scales at 1 (drawn with numpy: no compile per shape)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("norm"):
            out[name] = jnp.ones(shape, jnp.float32)
        else:
            out[name] = jnp.asarray(std * rng.standard_normal(shape), jnp.float32)
    return out


# ---- the arithmetic (HF LlamaForCausalLM) -------------------------------------------------
def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return scale * x32.astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """x [B, T, N, E] rotated by position (HF's rotate_half layout)."""
    e = x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, e, 2, dtype=jnp.float32) / e))  # [E/2]
    freqs = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, E/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, E]
    x1, x2 = x[..., : e // 2], x[..., e // 2 :]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return x * jnp.cos(emb) + rotated * jnp.sin(emb)


def hidden_states(w, cfg: LlamaConfig, tokens, positions, mask) -> jax.Array:
    """tokens, positions int[B, T], mask bool[B, T(query), T(key)] -> final-normed [B, T, D]."""
    b, t = tokens.shape
    h, g, e = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    hi = jax.lax.Precision.HIGHEST
    x = jnp.take(w["embed"], tokens, axis=0)  # [B, T, D]
    neg = jnp.finfo(jnp.float32).min
    for layer in range(cfg.num_layers):
        y = rms_norm(x, w["attn_norm"][layer], cfg.rms_norm_eps)
        q = jnp.dot(y, w["wq"][layer], precision=hi).reshape(b, t, h, e)
        k = jnp.dot(y, w["wk"][layer], precision=hi).reshape(b, t, g, e)
        v = jnp.dot(y, w["wv"][layer], precision=hi).reshape(b, t, g, e)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
        k, v = jnp.repeat(k, h // g, axis=2), jnp.repeat(v, h // g, axis=2)  # [B, T, H, E]
        scores = jnp.einsum("bqhe,bkhe->bhqk", q, k, precision=hi) * e**-0.5
        scores = jnp.where(mask[:, None], scores, neg)
        probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
        att = jnp.einsum("bhqk,bkhe->bqhe", probs, v, precision=hi).reshape(b, t, h * e)
        x = x + jnp.dot(att, w["wo"][layer], precision=hi)
        y = rms_norm(x, w["mlp_norm"][layer], cfg.rms_norm_eps)
        gate = jax.nn.silu(jnp.dot(y, w["w_gate"][layer], precision=hi))
        up = jnp.dot(y, w["w_up"][layer], precision=hi)
        x = x + jnp.dot(gate * up, w["w_down"][layer], precision=hi)
    return rms_norm(x, w["final_norm"], cfg.rms_norm_eps)


def causal_mask(attention: jax.Array) -> jax.Array:
    """An HF-style padding mask int[B, T] (1 = real token) -> causal bool[B, T, T]."""
    t = attention.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    return causal[None] & (attention[:, None, :] != 0)


# ---- the nnx module ---------------------------------------------------------------------
class NnxLlama(nnx.Module):
    """The model as an nnx module; `hidden` / `head_weight` are jaxeval's contract."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs, weights: dict | None = None):
        self.cfg = cfg
        seed = int(jax.random.randint(rngs.params(), (), 0, 2**31 - 1))
        weights = init_weights(cfg, seed) if weights is None else weights
        for name in NAMES:
            setattr(self, name, nnx.Param(jnp.asarray(weights[name], jnp.float32)))

    def weights(self) -> dict[str, jax.Array]:
        return {name: getattr(self, name)[...] for name in NAMES}

    def hidden(self, tokens, positions, segment_ids, parent_ids) -> jax.Array:
        """jaxeval's contract: packed rows (the segment/parent rule as an explicit mask)."""
        mask = attention_mask(segment_ids, parent_ids)
        return hidden_states(self.weights(), self.cfg, tokens, positions, mask)

    def head_weight(self) -> jax.Array:
        return self.lm_head[...]

    def __call__(self, tokens, positions, mask) -> jax.Array:
        """Logits [B, T, V] under an explicit bool mask [B, T, T]."""
        h = hidden_states(self.weights(), self.cfg, tokens, positions, mask)
        return jnp.einsum("btd,vd->btv", h, self.lm_head[...], precision=jax.lax.Precision.HIGHEST)


def next_token_loss(model: NnxLlama, tokens: jax.Array) -> jax.Array:
    """Mean cross-entropy of rows tokens int[B, T + 1] (every row one unpadded sequence)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    b, t = inputs.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
    logits = model(inputs, positions, mask)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


# ---- checkpoints --------------------------------------------------------------------------
def hf_config(cfg: LlamaConfig, tokenizer):
    from transformers import LlamaConfig as HFLlamaConfig

    return HFLlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )


def save_hf_checkpoint(weights: dict, cfg: LlamaConfig, out_dir: str, tokenizer_dir: str) -> str:
    """Writes config.json, model.safetensors (HF tensor names, torch [out, in] layout) and the
    tokenizer files: a checkpoint for `jaxeval run` and `transformers` alike."""
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    os.makedirs(out_dir, exist_ok=True)
    hf_config(cfg, tok).save_pretrained(out_dir)
    w = {k: np.asarray(v, np.float32) for k, v in weights.items()}
    t = {"model.embed_tokens.weight": w["embed"], "model.norm.weight": w["final_norm"]}
    t["lm_head.weight"] = w["lm_head"]
    names = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj"}
    names.update({"wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj"})
    names["w_down"] = "mlp.down_proj"
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = w["attn_norm"][i]
        t[p + "post_attention_layernorm.weight"] = w["mlp_norm"][i]
        for ours, theirs in names.items():
            t[p + theirs + ".weight"] = w[ours][i].T
    t = {k: np.ascontiguousarray(v) for k, v in t.items()}
    save_file(t, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    for name in os.listdir(tokenizer_dir):
        src = os.path.join(tokenizer_dir, name)
        if os.path.isfile(src) and name != "config.json":
            shutil.copy(src, os.path.join(out_dir, name))
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}, f)
    return out_dir


def to_decoder(weights: dict, cfg: LlamaConfig, tokenizer):
    """The same weights as jaxeval's own decoder: (ModelSpec, params in `param_layout`)."""
    from jaxeval.models import spec_from_config

    spec = spec_from_config(hf_config(cfg, tokenizer))
    L, D, H, G, E = cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    w = weights
    params = {
        "embed": w["embed"],
        "lm_head": w["lm_head"],
        "final_norm": {"scale": w["final_norm"]},
        "layers": {
            "attn_norm": {"scale": w["attn_norm"]},
            "mlp_norm": {"scale": w["mlp_norm"]},
            "attn": {
                "q": w["wq"].reshape(L, D, H, E),
                "k": w["wk"].reshape(L, D, G, E),
                "v": w["wv"].reshape(L, D, G, E),
                "o": w["wo"].reshape(L, H, E, D),
            },
            "mlp": {"gate": w["w_gate"], "up": w["w_up"], "down": w["w_down"]},
        },
    }
    return spec, params
