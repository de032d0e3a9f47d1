"""Full-size configs through `jax.eval_shape`: parameter counts equal the published ones.

The numbers, from the architecture (per layer: q, k, v, o, 3 MLP matrices, norms [+ qkv biases]):
  Llama-3-8B   V 128256, D 4096, L 32, H 32, G 8, E 128, F 14336, untied
               2 * 128256*4096 + 32 * (4096*(4096 + 2*1024 + 4096) + 3*4096*14336 + 2*4096) + 4096
               = 8,030,261,248
  Gemma-2-9B   V 256000, D 3584, L 42, H 16, G 8, E 256, F 14336, tied, 4 norms per layer
               256000*3584 + 42 * (3584*(4096 + 2*2048 + 4096) + 3*3584*14336 + 4*3584) + 3584
               = 9,241,705,984
  Qwen2.5-7B   V 152064, D 3584, L 28, H 28, G 4, E 128, F 18944, untied, q/k/v biases
               2 * 152064*3584 + 28 * (3584*(3584 + 2*512 + 3584) + (3584 + 2*512)
               + 3*3584*18944 + 2*3584) + 3584 = 7,615,616,512
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import transformers as tr

from jaxeval.models import param_count, spec_from_config


def _llama3_8b():
    return tr.LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )


def _gemma2_9b():
    return tr.Gemma2Config(
        vocab_size=256000,
        hidden_size=3584,
        intermediate_size=14336,
        num_hidden_layers=42,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        max_position_embeddings=8192,
    )


def _qwen25_7b():
    return tr.Qwen2Config(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )


@pytest.mark.parametrize(
    "make, expected",
    [(_llama3_8b, 8_030_261_248), (_gemma2_9b, 9_241_705_984), (_qwen25_7b, 7_615_616_512)],
)
def test_full_size_param_counts(make, expected):
    spec = spec_from_config(make(), compute_dtype="bfloat16")
    abstract = spec.abstract_params("bfloat16")
    assert param_count(abstract) == expected == spec.param_count()
    tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)
    h = jax.eval_shape(spec.hidden, abstract, tokens, tokens, tokens, tokens)
    assert h.shape == (2, 16, spec.hidden_size) and h.dtype == jnp.bfloat16
    logits = jax.eval_shape(spec.head, abstract, h)
    assert logits.shape == (2, 16, spec.vocab_size)
    cache = jax.eval_shape(lambda: spec.init_cache(2, 32, jnp.bfloat16))
    step = jax.ShapeDtypeStruct((2, 1), jnp.int32)
    out, _ = jax.eval_shape(
        spec.forward_cached,
        abstract,
        cache,
        step,
        step,
        jax.ShapeDtypeStruct((2, 1), bool),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    assert out.shape == (2, 1, spec.hidden_size)
