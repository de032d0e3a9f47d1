"""Sizes a model file declares are bounded before anything is built from them.

Crafted files (GGUF headers, config.json fields, config-only `jaxeval plan`) each end in a named
error within seconds, run in a process whose address space is capped (`RLIMIT_AS`, 3 GiB):
a file claiming 2**31 layers once grew to 15.5 GB. A valid file, and a config at every cap at once,
still load and plan under the same limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.models.weights import bounds
from tests.conftest import REPO
from tests.helpers.crafted_models import patched_checkpoint, write_llama_gguf

pytest.importorskip("gguf")

LIMIT = 3 * 2**30  # bytes of address space for the whole process: jax, transformers and the case
SECONDS = 60  # per case, on a loaded 2-core machine (a named error takes well under a second)
CONFIGS = REPO / "configs" / "models"

# Runs each case of argv[2] (JSON: kind, path) under the limit; prints one JSON line per case.
SCRIPT = r"""
import json, resource, sys, time
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from jaxeval.errors import JaxevalError
from jaxeval.models import load_model
from jaxeval.plan.memory import plan_memory, read_config
from jaxeval.platform.mesh import make_abstract_mesh

for case in json.loads(sys.argv[2]):
    start = time.perf_counter()
    try:
        if case["kind"] == "load":
            load_model(case["path"])
        else:
            plan_memory(read_config(case["path"]), make_abstract_mesh("fsdp", 1))
        out = {"error": None, "named": False}
    except JaxevalError as e:
        out = {"error": str(e), "named": True}
    except BaseException as e:  # MemoryError included: reported, and the next case runs
        out = {"error": f"{type(e).__name__}: {e}", "named": False}
    out["seconds"] = time.perf_counter() - start
    print(json.dumps(out), flush=True)
"""


def _gguf_cases(tmp_path) -> list[tuple[str, str, str, list[str]]]:
    """(name, kind, path, needles): None needles = must load."""
    cases = [
        ("valid", {}, None),
        ("layers 2**31", {"block_count": 2**31}, ["'llama.block_count'", "2,147,483,648"]),
        ("layers 64 of 1", {"block_count": 64}, ["'llama.block_count'", "64 layers", "cover 1"]),
        ("heads 2**31", {"head_count": 2**31}, ["'llama.attention.head_count'", "at most 1,024"]),
        ("heads 0", {"head_count": 0}, ["'llama.attention.head_count'", "at least 1"]),
        ("kv heads 0", {"head_count_kv": 0}, ["'llama.attention.head_count_kv'", "at least 1"]),
        ("heads 64 of 4", {"head_count": 64, "head_count_kv": 64}, ["'layers.attn.k'", "(32, 64)"]),
        (
            "heads 64, odd width",
            {"head_count": 64, "head_count_kv": 32},
            ["do not split into", "heads of an even width"],
        ),
        ("width 2**40", {"embedding_length": 2**40}, ["'llama.embedding_length'", "131,072"]),
        ("width 128 of 64", {"embedding_length": 128}, ["hidden width of 128", "width 64"]),
        ("vocab 2**31", {"vocab_size": 2**31}, ["'llama.vocab_size'", "4,194,304"]),
        ("vocab 1000 of 32", {"vocab_size": 1000}, ["vocabulary of 1,000", "32 rows"]),
        ("positions 2**40", {"context_length": 2**40}, ["'llama.context_length'"]),
        ("alignment 0", {"alignment": 0}, ["'general.alignment'", "power of two"]),
        ("alignment text", {"alignment": "abc"}, ["'general.alignment'", "'abc'"]),
    ]
    out = []
    for i, (name, meta, needles) in enumerate(cases):
        path = write_llama_gguf(str(tmp_path / f"case{i}.gguf"), **meta)
        out.append((f"gguf {name}", "load", path, needles))
    return out


def _checkpoint_cases(tmp_path, tiny) -> list[tuple[str, str, str, list[str]]]:
    llama, mixtral = tiny("llama"), tiny("mixtral")
    cases = [
        ("layers 2**31", llama, {"num_hidden_layers": 2**31}, ["'num_hidden_layers'", "1,024"]),
        ("layers 64 of 2", llama, {"num_hidden_layers": 64}, ["64 layers", "cover 2"]),
        ("heads 2**31", llama, {"num_attention_heads": 2**31}, ["'num_attention_heads'"]),
        ("heads 0", llama, {"num_attention_heads": 0}, ["'num_attention_heads'", "at least 1"]),
        ("heads 16 of 4", llama, {"num_attention_heads": 16}, ["o_proj", "(64, 64)"]),
        ("head_dim 2**30", llama, {"head_dim": 2**30}, ["'head_dim'", "4,096"]),
        ("vocab 2**31", llama, {"vocab_size": 2**31}, ["'vocab_size'"]),
        ("vocab of 512", llama, {"vocab_size": 100_000}, ["vocabulary of 100,000", "512 rows"]),
        ("width 2**31", llama, {"hidden_size": 2**31}, ["'hidden_size'", "131,072"]),
        ("positions 2**40", llama, {"max_position_embeddings": 2**40}, ["positions"]),
        ("rotary 1e9", llama, {"partial_rotary_factor": 1e9}, ["'partial_rotary_factor'"]),
        ("experts 2**31", mixtral, {"num_local_experts": 2**31}, ["'num_local_experts'"]),
        ("experts 64 of 8", mixtral, {"num_local_experts": 64}, ["64 experts", "cover 8"]),
    ]
    return [
        (f"config.json {name}", "load", patched_checkpoint(src, str(tmp_path / f"ck{i}"), **f), n)
        for i, (name, src, f, n) in enumerate(cases)
    ]


def _plan_cases(tmp_path) -> list[tuple[str, str, str, list[str] | None]]:
    every_cap = {
        "num_hidden_layers": 1024,
        "hidden_size": 2**17,
        "intermediate_size": 2**17,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 2**12,
        "vocab_size": 2**22,
        "max_position_embeddings": 2**24,
    }
    cases = [
        ("llama-3-8b", "every cap at once", every_cap, None),
        ("llama-3-8b", "layers 2**31", {"num_hidden_layers": 2**31}, ["'num_hidden_layers'"]),
        ("llama-3-8b", "heads 0", {"num_attention_heads": 0}, ["at least 1"]),
        (
            "llama-3-8b",
            "width / heads",
            {"hidden_size": 2**17, "num_attention_heads": 16},
            ["wide"],
        ),
        ("qwen3-30b-a3b", "experts 2**31", {"num_experts": 2**31}, ["'num_experts'"]),
        ("gemma-2-9b", "window pattern 0", {"sliding_window_pattern": 0}, ["at least 1"]),
    ]
    out = []
    for i, (model, name, fields, needles) in enumerate(cases):
        path = patched_checkpoint(str(CONFIGS / model), str(tmp_path / f"plan{i}"), **fields)
        out.append((f"plan {model} {name}", "plan", path, needles))
    return out


def _run_cases(cases: list[tuple[str, str, str, list[str] | None]]) -> None:
    """Runs `cases` in one process under `LIMIT`: each a named error with its needles (or, with
    None, no error), one paragraph and a What to do, within `SECONDS`."""
    argv = json.dumps([{"kind": kind, "path": path} for _, kind, path, _ in cases])
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}  # one CPU device
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(LIMIT), argv],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )  # fmt: skip
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(results) == len(cases), done.stderr[-3000:]
    failures = []
    for (name, _, _, needles), got in zip(cases, results):
        if needles is None:
            ok = got["error"] is None
        else:
            ok = got["named"] and all(n in got["error"] for n in needles)
            ok = ok and "\n  What to do: " in got["error"] and got["error"].count("\n") == 1
        if not ok or got["seconds"] > SECONDS:
            failures.append(f"{name}: {got}")
    assert not failures, "\n".join(failures)


def test_crafted_gguf_files_and_configs_alone_fail_by_name_within_a_memory_limit(tmp_path):
    """GGUF headers (`load_model`) and config-only plans (`jaxeval plan`); no torch needed."""
    _run_cases(_gguf_cases(tmp_path) + _plan_cases(tmp_path))


def test_crafted_checkpoint_configs_fail_by_name_within_a_memory_limit(tmp_path, tiny):
    """config.json beside real safetensors weights (the tiny checkpoints are built with torch)."""
    _run_cases(_checkpoint_cases(tmp_path, tiny))


# --------------------------------------------------------------------------- the caps themselves


@pytest.mark.parametrize("model", sorted(p.name for p in CONFIGS.iterdir()))
def test_every_shipped_config_is_within_the_caps(model):
    assert bounds.read_config_json(str(CONFIGS / model))["model_type"]


@pytest.mark.parametrize(
    "config,needles",
    [
        ({"num_hidden_layers": True}, ["True is not a whole number of layers"]),
        ({"num_hidden_layers": "12"}, ["'12' is not a whole number"]),
        ({"num_attention_heads": 2.5}, ["2.5 is not a whole number"]),
        ({"vocab_size": float("inf")}, ["inf is not a whole number"]),
        ({"num_hidden_layers": -1}, ["-1 layers", "at least 1"]),
        ({"num_key_value_heads": [8, 8, 2**40]}, ["1,099,511,627,776 attention heads"]),
        ({"text_config": {"num_hidden_layers": 2**31}}, ["'text_config.num_hidden_layers'"]),
        ({"rope_scaling": {"original_max_position_embeddings": 0}}, ["at least 1"]),
        ({"rotary_pct": -0.5}, ["'rotary_pct'", "between 0 and 1"]),
        ({"n_embd": 2**17, "n_head": 1}, ["131,072 wide", "'num_attention_heads'"]),
    ],
)
def test_each_bad_size_is_named(config, needles):
    with pytest.raises(JaxevalError) as err:
        bounds.check_config_dict(config, file="m/config.json")
    assert "file m/config.json" in str(err.value)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_sizes_a_model_may_leave_out_or_zero_pass():
    bounds.check_config_dict(
        {
            "num_hidden_layers": 2,
            "num_key_value_heads": None,
            "n_shared_experts": 0,
            "q_lora_rank": None,
            "sliding_window": 0,
            "max_position_embeddings": 4096.0,  # a whole number written as a float
            "head_dim": None,
            "hidden_size": 64,
            "num_attention_heads": 4,
        },
        file="m/config.json",
    )


def test_a_config_object_is_checked_when_its_spec_is_built():
    from transformers import LlamaConfig

    from jaxeval.models.families import spec_from_config

    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=32)
    cfg.num_hidden_layers = 2**31  # set after construction: transformers' own checks are past
    with pytest.raises(JaxevalError, match="num_hidden_layers.*1,024"):
        spec_from_config(cfg)


def test_counts_on_disk_from_names_and_shapes():
    shapes = {
        "model.embed_tokens.weight": (512, 64),
        "model.layers.0.mlp.experts.0.w1.weight": (32, 64),
        "model.layers.1.mlp.experts.7.w1.weight": (32, 64),
        "model.layers.1.block_sparse_moe.input_linear.weight": (8, 64, 64),
        "blk.3.ffn_gate_exps.weight": (16, 32, 64),
    }
    found = bounds.on_disk(shapes, shapes.__getitem__)
    assert (found.layers, found.first_layer, found.last_layer) == (3, 0, 3)
    assert found.experts == 16 and (found.vocab, found.width) == (512, 64)
    declared = {"layers": ("num_hidden_layers", 4)}
    with pytest.raises(JaxevalError, match="4 layers declared, but the tensors cover 3"):
        bounds.check_counts(declared, found, file="c.json", weights="the tensors", hint="h")
    bounds.check_counts({"layers": ("n", 3)}, found, file="c.json", weights="w", hint="h")
    none = bounds.on_disk([], lambda name: ())
    bounds.check_counts({"layers": ("n", 9)}, none, file="c.json", weights="w", hint="h")
