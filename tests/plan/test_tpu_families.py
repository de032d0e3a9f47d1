"""Every supported `model_type` compiles for a TPU v5e-8 through `jaxeval plan --topology`'s path.

Per family, a reduced bf16 config (2 layers, width 512, head dims of 128 (gpt-oss: 64), 4 query
and 2 kv heads, experts of width 256, windows of 128, a vocabulary of 4,096 (GPT-2: odd, as its
50,257)) with the family's own features from `tests.helpers.tiny_models` (windows, rope kinds,
latent attention, shared experts, sinks). `plan_topology` compiles what a run compiles: the
scoring bucket of 256 tokens with the most score points, the generation engine's admission
(prefill) and its decode chunk (8 rows x 256 slots); each must compile, fit a v5e chip, run our
Pallas kernels and nothing of the CPU's or the host's. 3.5 minutes for all on 2 cores.

The expected outcome per family is `TPU_PLAN_FAILS` (empty: every family compiles), the list the
README's "TPU plan" column is written from (`families_markdown`), so the column cannot drift from
this test. libtpu is a test dependency (`jaxeval[tpu]` in the test extra), as for
tests/plan/test_tpu_plan.py.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.models import experts as E
from jaxeval.models.families import SUPPORTED_MODEL_TYPES, table
from jaxeval.models.families.table import TPU_PLAN_FAILS, TPU_PLAN_TOPOLOGY
from jaxeval.plan.compiled import plan_topology
from tests.helpers import tiny_models
from tests.helpers.tpu import compile_text, single_tpu_mesh

WIDTH, FFN, EXPERT, WINDOW, VOCAB = 512, 1024, 256, 128, 4096
LENGTH, GEN_ROWS, GEN_NEW = 256, 8, 64

# The reduced shapes over tiny_models' per-family configs: the Llama-style families' fields
COMMON = dict(
    hidden_size=WIDTH,
    intermediate_size=FFN,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=128,
    max_position_embeddings=4096,
)
WINDOWED = dict(sliding_window=WINDOW)
MLA = dict(
    num_key_value_heads=4, kv_lora_rank=128, qk_rope_head_dim=64, qk_nope_head_dim=128,
    v_head_dim=128, moe_intermediate_size=EXPERT,
)  # fmt: skip
OVERRIDES: dict[str, dict[str, Any]] = {
    "llama": COMMON,
    "mistral": {**COMMON, **WINDOWED},
    "qwen2": COMMON,
    "qwen3": COMMON,
    "gemma": COMMON,
    "gemma2": {**COMMON, **WINDOWED, "query_pre_attn_scalar": 128},
    "gemma3": {**COMMON, **WINDOWED, "query_pre_attn_scalar": 128},
    "gpt2": dict(n_embd=WIDTH, n_head=4, n_positions=1024),
    "gpt_neox": dict(
        hidden_size=WIDTH,
        intermediate_size=FFN,
        num_attention_heads=4,
        max_position_embeddings=4096,
    ),
    "phi3": {**COMMON, **WINDOWED},
    "olmo2": COMMON,
    "olmo3": {**COMMON, **WINDOWED},
    "granite": COMMON,
    "smollm3": COMMON,
    "exaone4": {**COMMON, **WINDOWED},
    "cohere": COMMON,
    "cohere2": {**COMMON, **WINDOWED},
    "starcoder2": {**COMMON, **WINDOWED},
    "falcon_mqa": dict(hidden_size=WIDTH, num_attention_heads=4, ffn_hidden_size=FFN),
    "mixtral": {**COMMON, **WINDOWED, "intermediate_size": EXPERT},
    # Qwen1.5-MoE's 60 experts divide no slice: 12 here, 4 per token
    "qwen2_moe": {
        **COMMON,
        "moe_intermediate_size": EXPERT,
        "shared_expert_intermediate_size": WIDTH,
        "num_experts": 12,
        "num_experts_per_tok": 4,
    },
    "qwen3_moe": {**COMMON, "moe_intermediate_size": EXPERT},
    "olmoe": {**COMMON, "intermediate_size": EXPERT},
    "granitemoe": {**COMMON, "intermediate_size": EXPERT},
    "gpt_oss": {
        **COMMON,
        **WINDOWED,
        "intermediate_size": EXPERT,
        "head_dim": 64,
        "num_attention_heads": 8,
    },
    "deepseek_v2": {**COMMON, **MLA},
    "deepseek_v3": {**COMMON, **MLA, "q_lora_rank": 256},
    "glm4_moe": {**COMMON, "moe_intermediate_size": EXPERT},
}
# the model_type -> tiny_models' family where they differ (Falcon-7B's multi-query attention)
TINY = {"falcon": "falcon_mqa", "gemma3_text": "gemma3"}


def reduced_config(model_type: str) -> Any:
    """The transformers config of `model_type` at the reduced shapes (module docstring)."""
    if model_type == "gemma3":  # the image-text config around the text decoder's
        import transformers

        text = reduced_config("gemma3_text")
        return transformers.Gemma3Config(text_config=text.to_dict())
    family = TINY.get(model_type, model_type)
    vocab = VOCAB + (model_type == "gpt2")
    config = tiny_models._config(family, vocab, 1, 2, OVERRIDES[family])
    assert config.model_type == model_type, (config.model_type, model_type)
    return config


def _expected(model_type: str) -> Any:
    if model_type not in TPU_PLAN_FAILS:
        return model_type
    mark = pytest.mark.xfail(reason=TPU_PLAN_FAILS[model_type], strict=True)
    return pytest.param(model_type, marks=mark)


def test_every_family_has_a_reduced_config():
    assert set(TPU_PLAN_FAILS) <= set(SUPPORTED_MODEL_TYPES)
    for model_type in SUPPORTED_MODEL_TYPES:
        assert reduced_config(model_type).model_type == model_type


def _most_points_prefill_and_decode(job) -> bool:
    """The scoring bucket of the most points (the larger head: the fewest points' bucket differs
    from it only there, and doubles the compile time), the prefill and the decode step."""
    return job.kind != "score" or re.fullmatch(r"score T=(\d+) K=\1 B=\d+", job.name) is not None


@pytest.mark.slow
@pytest.mark.parametrize("model_type", [_expected(t) for t in SUPPORTED_MODEL_TYPES])
def test_family_compiles_for_a_tpu_slice(model_type):
    plan = plan_topology(
        reduced_config(model_type),
        TPU_PLAN_TOPOLOGY,
        max_length=LENGTH,
        lengths=[LENGTH],
        token_budget=GEN_ROWS * LENGTH,
        gen_rows=GEN_ROWS,
        gen_slots=LENGTH,
        gen_new=GEN_NEW,
        count_layers=False,
        keep=_most_points_prefill_and_decode,
    )
    chip = plan.topology.chip
    assert [e.kind for e in plan.executables] == ["score", "prefill", "decode"]
    for e in plan.executables:
        assert e.error is None, (e.name, e.error)
        assert 0 < e.hbm_bytes <= chip.hbm_bytes, (e.name, e.hbm_bytes)
        assert e.cpu_custom_calls == 0 and e.host_transfers == 0, e.name
        assert e.pallas_kernels > 0, (e.name, "no Pallas TPU kernel in the HLO")
    assert plan.ok and plan.attention == "tpu"


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_ragged_experts_compile_for_tpu_in_both_dtypes(dtype):
    """XLA:TPU runs `ragged_dot` as a Mosaic grouped-matmul kernel, which refuses HIGHEST precision
    on bfloat16 operands ("Bad lhs type"): `ragged_matmul` asks HIGHEST of float32 operands only."""
    mesh = single_tpu_mesh()
    full = NamedSharding(mesh, P())
    h = jax.ShapeDtypeStruct((256, 512), dtype, sharding=full)
    w = jax.ShapeDtypeStruct((8, 512, 256), dtype, sharding=full)
    sizes = jax.ShapeDtypeStruct((8,), np.int32, sharding=full)
    text = compile_text(E.ragged_matmul, h, w, sizes)
    assert "tpu_custom_call" in text  # the grouped-matmul kernel, not a dense expansion


def test_ragged_matmul_on_the_cpu_is_the_highest_ragged_dot():
    """float32 (and bfloat16) results on the CPU are `ragged_dot` at HIGHEST's, bit for bit."""
    rng = np.random.default_rng(0)
    sizes = jnp.asarray([10, 0, 20, 7, 30, 5, 15, 10], jnp.int32)
    for dtype in (jnp.float32, jnp.bfloat16):
        h = jnp.asarray(rng.normal(size=(97, 64)), dtype)
        w = jnp.asarray(rng.normal(size=(8, 64, 48)), dtype)
        highest = jax.lax.ragged_dot(h, w, sizes, precision=jax.lax.Precision.HIGHEST)
        ours = jax.jit(E.ragged_matmul)(h, w, sizes)
        assert ours.dtype == dtype
        np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(highest, np.float32))


def test_the_readme_column_reads_the_expected_outcomes(monkeypatch):
    assert table.tpu_plan_outcome("llama") == "compiles (v5e-8)"
    monkeypatch.setitem(table.TPU_PLAN_FAILS, "llama", "decode: RESOURCE_EXHAUSTED")
    assert table.tpu_plan_outcome("llama") == "fails (v5e-8): decode: RESOURCE_EXHAUSTED"
    row = next(r for r in table.families_markdown().splitlines() if r.startswith("| `llama` |"))
    assert row.endswith("| fails (v5e-8): decode: RESOURCE_EXHAUSTED |")
