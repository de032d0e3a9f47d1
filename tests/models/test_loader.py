"""Loading: sharded index checkpoints, storage/compute dtypes, the torch-free demo checkpoint, and
clear errors (unsupported model_type, missing files, unknown dtype, remote code)."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import time

import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.errors import JaxevalError
from jaxeval.models import SUPPORTED_MODEL_TYPES, load_model
from tests.helpers.tiny_models import load_torch_model
from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits


def _copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def test_sharded_index_checkpoint(tiny, models):
    path = tiny("llama", max_shard_size="100KB")
    assert os.path.isfile(os.path.join(path, "model.safetensors.index.json"))
    assert len([f for f in os.listdir(path) if f.endswith(".safetensors")]) > 2
    loaded = load_model(path)
    reference, torch_model = models("llama")
    tokens = np.random.default_rng(0).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
    assert_logits_close(ours, torch_logits(torch_model, tokens))


def test_bfloat16_storage_and_compute(tiny, models):
    loaded = load_model(tiny("gemma2"), dtype="bfloat16")
    assert loaded.spec.compute_dtype == "bfloat16"
    assert all(x.dtype == jnp.bfloat16 for x in jax_leaves(loaded.params))
    reference, _ = models("gemma2")
    tokens = np.random.default_rng(0).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    ours = np.asarray(logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens)), np.float32)
    ref = np.asarray(logits_fn(reference.spec, reference.params, tokens, *full_rows(tokens)))
    assert np.isfinite(ours).all()
    assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()  # bf16 is close, not equal
    mixed = load_model(tiny("gemma2"), dtype="bfloat16", compute_dtype="float32")
    assert mixed.spec.compute_dtype == "float32"


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_unsupported_model_type_lists_supported(tiny, tmp_path):
    path = _copy(tiny("llama"), str(tmp_path / "m"))
    cfg = json.load(open(os.path.join(path, "config.json")))
    cfg["model_type"] = "mamba"
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    with pytest.raises(JaxevalError) as err:
        load_model(path)
    message = str(err.value)
    assert "'mamba'" in message and "not supported" in message
    assert all(t in message for t in SUPPORTED_MODEL_TYPES)


def test_missing_weights_file_is_named(tiny, tmp_path):
    path = _copy(tiny("llama"), str(tmp_path / "m"))
    os.remove(os.path.join(path, "model.safetensors"))
    with pytest.raises(JaxevalError, match="model.safetensors"):
        load_model(path)


def test_missing_shard_is_named(tiny, tmp_path):
    path = _copy(tiny("llama", max_shard_size="100KB"), str(tmp_path / "m"))
    shard = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))[0]
    os.remove(os.path.join(path, shard))
    with pytest.raises(JaxevalError, match=shard):
        load_model(path)


def test_missing_tensor_is_named(tiny, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = _copy(tiny("gpt_neox"), str(tmp_path / "m"))
    weights = os.path.join(path, "model.safetensors")
    tensors = load_file(weights)
    del tensors["gpt_neox.layers.1.attention.dense.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(JaxevalError, match=r"gpt_neox\.layers\.1\.attention\.dense\.weight"):
        load_model(path)


def test_wrong_shape_in_a_later_layer_is_named(tiny, tmp_path):
    """Layers after the first are converted straight into the stacked buffer; a bad one still gets
    the named shape error, not a numpy broadcast error."""
    from safetensors.numpy import load_file, save_file

    path = _copy(tiny("llama"), str(tmp_path / "m"))
    weights = os.path.join(path, "model.safetensors")
    tensors = load_file(weights)
    for name in ["model.layers.1.mlp.up_proj.weight", "model.layers.1.self_attn.q_proj.weight"]:
        broken = dict(tensors, **{name: tensors[name][:-1]})  # q_proj: no longer whole heads
        save_file(broken, weights, metadata={"format": "pt"})
        with pytest.raises(JaxevalError, match=re.escape(name) + r".*does not convert"):
            load_model(path)


def test_strip_transpose_and_in_place_conversion():
    from jaxeval.models.weights import hf as hf_weights

    rng = np.random.default_rng(0)
    for shape in [(1, 1), (3, 130), (130, 3), (64, 64), (65, 200), (200, 65)]:
        w = rng.standard_normal(shape).astype(np.float32)
        t = hf_weights.transpose(w)
        assert t.flags.c_contiguous and np.array_equal(t, w.T)
    w = rng.standard_normal((6, 4)).astype(np.float32)  # [heads*dim, in], 2 heads of 3
    convert = hf_weights.linear_heads(2, 3)
    dest = np.zeros((2, 4, 2, 3), np.float16)  # a stacked buffer of another dtype: cast on write
    assert convert.into(w, dest[1])
    assert np.array_equal(dest[1], convert(w).astype(np.float16)) and not dest[0].any()
    assert np.array_equal(convert(w), w.T.reshape(4, 2, 3))
    assert not convert.into(w[:5], dest[1])  # wrong shape: refused, untouched
    assert not convert.into(w[0], dest[1])  # not a matrix: refused
    assert np.array_equal(dest[1], convert(w).astype(np.float16))
    out_heads = hf_weights.linear_out_heads(2, 2)  # [out, heads*dim] -> [heads, dim, out]
    assert np.array_equal(out_heads(w), w.T.reshape(2, 2, 6))


def test_missing_config_and_unknown_dir(tmp_path):
    with pytest.raises(JaxevalError, match="config.json"):
        load_model(str(tmp_path))
    with pytest.raises(JaxevalError, match="neither a local directory"):
        load_model("no-such-org/no-such-model-xyz")


def test_unknown_dtype(tiny):
    with pytest.raises(JaxevalError, match="unknown dtype 'float8'"):
        load_model(tiny("llama"), dtype="float8")
    with pytest.raises(JaxevalError, match="unknown compute_dtype"):
        load_model(tiny("llama"), compute_dtype="int8")


def test_remote_code_refused_without_flag(tiny, tmp_path):
    path = _copy(tiny("llama"), str(tmp_path / "m"))
    cfg = json.load(open(os.path.join(path, "config.json")))
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomModel"}
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    with pytest.raises(JaxevalError, match="trust_remote_code"):
        load_model(path)


def test_classic_rope_keys_are_read(tiny, tmp_path):
    """An older-style config (rope_theta + rope_scaling, no rope_parameters) loads the same model."""
    path = _copy(tiny("llama3_rope"), str(tmp_path / "m"))
    cfg = json.load(open(os.path.join(path, "config.json")))
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    assert load_model(path).spec == load_model(tiny("llama3_rope")).spec


def test_write_tiny_llama_is_loadable_by_both(tmp_path, tiny):
    from jaxeval.demo.tiny import write_tiny_llama

    tok_dir = os.path.join(os.path.dirname(tiny("llama")), "tokenizer-llama")
    path = write_tiny_llama(str(tmp_path / "demo"), tok_dir, seed=1)
    start = time.perf_counter()
    loaded = load_model(path)
    elapsed = time.perf_counter() - start
    assert loaded.spec.model_type == "llama" and loaded.spec.num_layers == 2
    assert loaded.spec.max_position_embeddings == 512 == loaded.hf_config.max_position_embeddings
    tokens = np.random.default_rng(0).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
    assert_logits_close(ours, torch_logits(load_torch_model(path), tokens))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"write_tiny_llama load {elapsed:.3f}s, process peak RSS {rss_mb:.0f} MB")


def test_gemma3_image_text_checkpoint_loads_its_text_decoder(tiny, models, tmp_path):
    """A `gemma3` (image-text) config with `text_config`, weights under model.language_model.*."""
    from safetensors.numpy import load_file, save_file

    path = _copy(tiny("gemma3"), str(tmp_path / "m"))
    text = json.load(open(os.path.join(path, "config.json")))
    cfg = {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": text,
    }
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    weights = os.path.join(path, "model.safetensors")
    tensors = {
        k.replace("model.", "model.language_model.", 1): v for k, v in load_file(weights).items()
    }
    save_file(tensors, weights, metadata={"format": "pt"})
    loaded = load_model(path)
    reference, _ = models("gemma3")
    assert loaded.spec == reference.spec
    tokens = np.random.default_rng(0).integers(0, loaded.spec.vocab_size, (2, 24)).astype(np.int32)
    np.testing.assert_array_equal(
        np.asarray(logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))),
        np.asarray(logits_fn(reference.spec, reference.params, tokens, *full_rows(tokens))),
    )
