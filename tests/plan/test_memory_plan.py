"""`jaxeval plan`: per-device memory from config.json alone, on abstract meshes of any size; the
guides' rows recomputed by hand from the public configs."""

from __future__ import annotations

import dataclasses

import pytest

from jaxeval.cli import main
from jaxeval.errors import JaxevalError
from jaxeval.models.families import spec_from_config
from jaxeval.plan.memory import expert_width_ways, plan_memory, read_config
from jaxeval.platform.mesh import make_abstract_mesh as abstract_mesh
from tests.conftest import REPO

MODELS = REPO / "configs" / "models"


@pytest.mark.parametrize(
    "name, billions", [("llama-3-8b", 8.03), ("gemma-2-9b", 9.24), ("llama-3-70b", 70.55)]
)
def test_parameter_counts_match_the_published_sizes(name, billions):
    plan = plan_memory(read_config(str(MODELS / name)), abstract_mesh("fsdp", 8))
    assert round(plan.parameters / 1e9, 2) == billions


@pytest.mark.parametrize(
    "name, billions, active", [("qwen3-30b-a3b", 30.53, 3.35), ("deepseek-v3", 671.03, 37.55)]
)
def test_moe_counts_match_the_published_sizes(name, billions, active):
    """Every expert is resident (the total), a token uses K of X routed experts (the active)."""
    plan = plan_memory(read_config(str(MODELS / name)), abstract_mesh("fsdp", 8))
    assert round(plan.parameters / 1e9, 2) == billions
    assert round(plan.active_parameters / 1e9, 2) == active


def test_qwen3_moe_experts_split_over_the_model_axis_by_hand():
    """Qwen3-30B-A3B on data 2 x model 4: the 128 experts of each layer split 4 ways (expert
    parallelism), so a device holds 32 whole experts; the rest as the rule table says."""
    V, D, L, H, G, E, X, F = 151936, 2048, 48, 32, 4, 128, 128, 768
    config = read_config(str(MODELS / "qwen3-30b-a3b"))
    plan = plan_memory(config, abstract_mesh("data_model", 8, model=4), max_length=4096)
    experts = L * X * 3 * D * F // 4  # gate, up, down: [L, X / 4, ...] per device
    router = L * D * X // 4  # [L, D, X]: X over model
    attention = L * (D * H * E + 2 * D * G * E + H * E * D) // 4  # q, k, v, o: heads split
    embeddings = 2 * V * D // 4
    norms = L * (2 * D + 2 * E) + D
    assert plan.param_bytes == 2 * (experts + router + attention + embeddings + norms)


def test_expert_width_splits_only_without_expert_parallelism():
    """An expert's width Fx splits over model only where the experts dimension does not take it:
    Qwen3-30B-A3B's 128 experts on model 4 are whole per device; 6 experts cannot split 4 ways,
    so each expert's width does."""
    spec = spec_from_config(read_config(str(MODELS / "qwen3-30b-a3b")))
    mesh = abstract_mesh("data_model", 8, model=4)
    assert expert_width_ways(mesh, spec) == 1
    six = dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, num_experts=6, top_k=2))
    assert expert_width_ways(mesh, six) == 4


def test_llama3_8b_on_8_devices_by_hand():
    """Llama-3-8B, bfloat16, fsdp over 8 devices: every matrix splits its D = 4096 rows by 8 (the
    rule table shards `embed` over fsdp), norms are replicated."""
    V, D, F, L, H, G, E = 128256, 4096, 14336, 32, 32, 8, 128
    sharded = 2 * V * D + L * (D * H * E + 2 * D * G * E + H * E * D + 3 * D * F)
    replicated = (2 * L + 1) * D
    plan = plan_memory(read_config(str(MODELS / "llama-3-8b")), abstract_mesh("fsdp", 8))
    assert plan.param_bytes == 2 * (sharded // 8 + replicated)
    # KV cache: 64 rows x 8192 slots, rows split 8 ways: k and v [L, B/8, C, G, E] in bf16,
    # plus valid (bool) and positions (int32) [B/8, C]
    rows, slots = 64 // 8, 8192
    assert plan.kv_bytes == 2 * 2 * L * rows * slots * G * E + rows * slots * (1 + 4)
    assert plan.mesh == {"data": 1, "fsdp": 8, "model": 1}


def test_model_axis_splits_heads_and_mlp():
    config = read_config(str(MODELS / "llama-3-70b"))
    fsdp = plan_memory(config, abstract_mesh("fsdp", 8))
    model = plan_memory(config, abstract_mesh("data_model", 8, model=8))
    assert model.param_bytes == pytest.approx(fsdp.param_bytes, rel=0.01)
    assert model.activation_bytes < fsdp.activation_bytes * 8  # heads and F split 8 ways


def test_cli_prints_the_plan(capsys):
    path = MODELS / "gemma-2-9b"
    code = main(["plan", "--model_args", f"pretrained={path}", "--devices", "64",
                 "--device_memory", "95"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "gemma2, 9.24 B parameters in bfloat16" in out and "fsdp=64" in out and "fits" in out


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(JaxevalError, match="no config.json"):
        read_config(str(tmp_path))
    assert main(["plan", "--model_args", f"pretrained={tmp_path}"]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main(["plan", "--model_args", f"pretrained={MODELS / 'llama-3-8b'},batch=3"]) == 2
    with pytest.raises(JaxevalError, match="unknown mesh preset"):
        abstract_mesh("ring", 8)


def test_deepseek_v3_cache_holds_the_latent_by_hand():
    """MLA's KV cache holds one shared key and value of E_r + R_kv = 64 + 512 features per token
    and layer (not 128 heads x 2 x 192 expanded): 61 layers, 64 rows over 8 devices, bf16."""
    L, W, rows, slots = 61, 64 + 512, 64 // 8, 4096
    config = read_config(str(MODELS / "deepseek-v3"))
    plan = plan_memory(config, abstract_mesh("fsdp", 8), max_length=slots)
    assert plan.kv_bytes == 2 * 2 * L * rows * slots * W + rows * slots * (1 + 4)
