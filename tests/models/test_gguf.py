"""GGUF loading: our reader's dequantization against the `gguf` package's, errors, tiny round trips.

The real-model checks (SmolLM2-135M GGUF against transformers and lm-eval) are in
tests/e2e/test_real_model_parity.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from jaxeval.errors import JaxevalError  # noqa: E402
from jaxeval.models.weights.gguf_file import GGUFFile  # noqa: E402

QUANT = gguf.GGMLQuantizationType
TYPES = [
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "MXFP4",
]


def _write(
    path: str,
    tensors: dict[str, tuple[np.ndarray, tuple[int, ...] | None, object]],
    arch: str = "llama",
) -> str:
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    for name, (data, raw_shape, raw_dtype) in tensors.items():
        w.add_tensor(name, data, raw_shape=raw_shape, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _stored(type_name: str, rows: int, cols: int, rng: np.random.Generator):
    """(array for GGUFWriter, raw_shape, raw_dtype): quantized by gguf where it can, else raw blocks."""
    qtype = QUANT[type_name]
    values = rng.standard_normal((rows, cols)).astype(np.float32)
    if type_name == "F32":
        return values, None, None
    if type_name == "F16":
        return values.astype(np.float16), None, None
    try:  # (MXFP4: gguf quantizes; our reader dequantizes it itself, see test_mxfp4.py)
        data = gguf.quants.quantize(values, qtype)
    except NotImplementedError:  # K-quants: gguf only dequantizes them; random whole blocks
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        data = rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)
    return data, None, qtype  # the writer infers the value shape from the byte shape


@pytest.mark.parametrize("type_name", TYPES)
def test_dequantization_is_bit_exact_with_gguf_reference(tmp_path, type_name):
    rng = np.random.default_rng(len(type_name) * 7 + TYPES.index(type_name))
    data, raw_shape, raw_dtype = _stored(type_name, 6, 512, rng)
    path = _write(str(tmp_path / "t.gguf"), {"w": (data, raw_shape, raw_dtype)})

    ref_tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "w")
    # the bytes where gguf's reader locates the tensor, as whole rows of blocks (its `.data` and
    # `n_bytes` undersize BF16, so the size comes from the block table)
    block, size = gguf.GGML_QUANT_SIZES[ref_tensor.tensor_type]
    start, n_bytes = ref_tensor.data_offset, 6 * 512 // block * size
    raw = np.fromfile(path, np.uint8)[start : start + n_bytes].reshape(6, -1)
    reference = gguf.quants.dequantize(raw, ref_tensor.tensor_type).astype(np.float32)
    reference = reference.reshape(6, 512)

    f = GGUFFile(path)
    assert f.type_name("w") == type_name and f.shape("w") == (6, 512)
    ours = f.read("w")
    assert ours.dtype == np.float32 and ours.shape == (6, 512)
    np.testing.assert_array_equal(ours.view(np.uint32), reference.view(np.uint32))
    rows = f.read("w", slice(2, 5))  # a shard's rows alone, from their own byte range
    np.testing.assert_array_equal(rows.view(np.uint32), reference[2:5].view(np.uint32))


def test_metadata_and_3d_row_reads(tmp_path):
    values = np.arange(2 * 3 * 32, dtype=np.float32).reshape(2, 3, 32)
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(4)
    w.add_string("x.name", "héllo")
    w.add_array("x.list", [1, 2, 3])
    w.add_token_list(["a", "b"])
    w.add_tensor("cube", values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = GGUFFile(path)
    assert f.architecture == "llama" and f.metadata["llama.block_count"] == 4
    assert f.metadata["x.name"] == "héllo" and f.metadata["x.list"] == [1, 2, 3]
    assert f.metadata["tokenizer.ggml.tokens"] == ["a", "b"]
    np.testing.assert_array_equal(f.read("cube"), values)
    np.testing.assert_array_equal(f.read("cube", slice(1, 2)), values[1:2])


def _patch_type(path: str, new_type: int) -> None:
    """Rewrites the GGML type id of the file's only tensor (found just before its u64 offset)."""
    f = GGUFFile(path)
    (name,) = f.tensors
    raw = bytearray(open(path, "rb").read())
    at = raw.index(name.encode()) + len(name)
    n_dims = int.from_bytes(raw[at : at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    raw[type_at : type_at + 4] = new_type.to_bytes(4, "little")
    open(path, "wb").write(bytes(raw))


@pytest.mark.parametrize(
    "new_type,label", [(int(QUANT.Q8_1), "Q8_1"), (200, "unknown GGML type id 200")]
)
def test_unsupported_quantization_type_is_a_clear_error(tmp_path, new_type, label):
    path = _write(
        str(tmp_path / "q.gguf"),
        {"blk.0.attn_q.weight": (np.ones((2, 32), np.float32), None, None)},
    )
    _patch_type(path, new_type)
    with pytest.raises(JaxevalError) as err:
        GGUFFile(path).check_types()
    text = str(err.value)
    assert "blk.0.attn_q.weight" in text and label in text and "Q4_K" in text and path in text


def test_unsupported_architecture_lists_supported(tmp_path):
    from jaxeval.models import load_model

    path = _write(
        str(tmp_path / "mamba.gguf"),
        {"w": (np.ones((2, 32), np.float32), None, None)},
        arch="mamba",
    )
    with pytest.raises(JaxevalError) as err:
        load_model(path)
    assert "'mamba'" in str(err.value) and "llama" in str(err.value) and "gemma2" in str(err.value)


def test_bad_files_are_clear_errors(tmp_path):
    from jaxeval.models import load_model

    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(JaxevalError, match="not a GGUF file"):
        GGUFFile(str(not_gguf))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(JaxevalError, match="not a GGUF file"):
        GGUFFile(str(empty))
    good = _write(str(tmp_path / "g.gguf"), {"w": (np.ones((2, 32), np.float32), None, None)})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(good, "rb").read()[:40])
    with pytest.raises(JaxevalError, match="truncated"):
        GGUFFile(str(cut))
    with pytest.raises(JaxevalError, match="gguf_file"):
        load_model(str(tmp_path), gguf_file="missing.gguf")


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_tiny_gguf_round_trip_matches_transformers(tmp_path, family):
    """HF checkpoint -> GGUF (llama.cpp's export conventions) -> jaxeval: the HF model's logits."""
    from jaxeval.models import load_model
    from tests.helpers.gguf_writer import write_gguf
    from tests.helpers.tiny_models import load_torch_model, tiny_checkpoint
    from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits

    hf_dir = tiny_checkpoint(family)
    path = write_gguf(hf_dir, str(tmp_path / f"{family}.gguf"))
    loaded = load_model(path)
    assert loaded.gguf_file == path and loaded.spec.model_type == family
    tokens = (
        np.random.default_rng(0).integers(1, loaded.spec.vocab_size, size=(2, 24)).astype(np.int32)
    )
    ours = logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens))
    expected = torch_logits(load_torch_model(hf_dir), tokens)
    assert_logits_close(ours, expected, family)


def test_tiny_gguf_written_here_is_what_transformers_reads(tmp_path):
    """The test writer's conventions are llama.cpp's: transformers' GGUF loader gets the HF logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.gguf_writer import write_gguf
    from tests.helpers.tiny_models import load_torch_model, tiny_checkpoint
    from tests.models.common import assert_logits_close, torch_logits

    hf_dir = tiny_checkpoint("llama")
    path = write_gguf(hf_dir, str(tmp_path / "llama.gguf"))
    theirs = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=os.path.basename(path), dtype=torch.float32
    ).eval()
    tokens = np.random.default_rng(1).integers(1, 500, size=(2, 16))
    assert_logits_close(
        torch_logits(theirs, tokens), torch_logits(load_torch_model(hf_dir), tokens)
    )


def test_gguf_without_bos_or_eos_loads_and_names_the_prefix_token_when_needed(tmp_path):
    """No BOS/EOS is a valid file: scoring and generation (to the budget) run; only an empty
    context or a rolling window needs a prefix token, and then says to pass prefix_token_id."""
    import json

    from lm_eval.api.instance import Instance

    from jaxeval.lm.jax_lm import JaxLM
    from tests.helpers.gguf_writer import write_gguf
    from tests.helpers.tiny_models import tiny_checkpoint

    hf_dir = tiny_checkpoint("llama")
    with open(os.path.join(hf_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    chars = list("abcdefghijklmnopqrstuvwxyzĠ") + ["ab"]
    tokens = chars + [f"z{i}" for i in range(vocab - len(chars))]
    path = write_gguf(hf_dir, str(tmp_path / "nobos.gguf"), tokens=tokens, merges=["a b"])
    lm = JaxLM(pretrained=path)
    assert lm.eot_token_id is None and lm.prefix_token_id is None
    [(ll, _)] = lm.loglikelihood([Instance("loglikelihood", {}, ("ab c", " d"), 0)])
    assert np.isfinite(ll)
    gen = {"max_gen_toks": 3, "until": ["q"]}
    [text] = lm.generate_until([Instance("generate_until", {}, ("abc", gen), 0)])
    assert isinstance(text, str)
    with pytest.raises(JaxevalError, match="prefix_token_id=<a token id>"):
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("abc",), 0)])
    with pytest.raises(JaxevalError, match="tokenizer has no BOS or EOS"):
        lm.loglikelihood([Instance("loglikelihood", {}, ("", "abc"), 0)])


# config entries a tiny GGUF does not carry (names, token ids) or rounds (epsilon to float32)
_IGNORED = dict.fromkeys(
    [
        "_name_or_path",
        "_model_name_or_path",
        "architectures",
        "rms_norm_eps",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "dtype",
        "transformers_version",
    ]
)


def _moe_logits(loaded, tokens: np.ndarray) -> np.ndarray:
    from tests.models.common import full_rows, logits_fn

    return np.asarray(logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens)))


@pytest.mark.parametrize("fuse_gate_up", [False, True], ids=["split", "fused"])
@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe", "gpt_oss"])
def test_tiny_moe_gguf_round_trip_matches_safetensors(tmp_path, models, tiny, family, fuse_gate_up):
    """MoE checkpoint -> GGUF (stacked experts; gpt-oss's fused experts split; optionally gate and
    up fused back as llama.cpp's --fuse-gate-up-exps writes them) -> jaxeval: the logits of the
    safetensors checkpoint through `load_model`, and transformers' logits."""
    from jaxeval.models import load_model
    from tests.helpers.gguf_writer import write_gguf
    from tests.models.common import assert_logits_close, torch_logits

    reference, torch_model = models(family)
    path = write_gguf(tiny(family), str(tmp_path / f"{family}.gguf"), fuse_gate_up=fuse_gate_up)
    loaded = load_model(path)
    assert loaded.spec.model_type == family
    assert loaded.hf_config.to_dict() | _IGNORED == reference.hf_config.to_dict() | _IGNORED
    tokens = np.random.default_rng(0).integers(1, loaded.spec.vocab_size, size=(2, 24))
    tokens = tokens.astype(np.int32)
    ours = _moe_logits(loaded, tokens)
    assert_logits_close(ours, _moe_logits(reference, tokens), family)
    assert_logits_close(ours, torch_logits(torch_model, tokens), family)


@pytest.mark.parametrize(
    "family,sizes",
    [
        ("qwen2_moe", {"moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}),
        ("qwen3_moe", {"moe_intermediate_size": 32}),
    ],
)
def test_tiny_moe_gguf_written_here_is_what_transformers_reads(
    tmp_path, models, tiny, family, sizes
):
    """transformers' GGUF loader on the test writer's MoE files gets the HF logits, given the
    expert sizes its config table does not read (`expert_feed_forward_length`, ...; jaxeval reads
    them). (Its gpt-oss reader fails on llama.cpp's yarn metadata, so gpt-oss has no such check.)"""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.gguf_writer import write_gguf
    from tests.models.common import assert_logits_close, torch_logits

    path = write_gguf(tiny(family), str(tmp_path / f"{family}.gguf"))
    theirs = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=os.path.basename(path), dtype=torch.float32, **sizes
    ).eval()
    tokens = np.random.default_rng(1).integers(1, 500, size=(2, 16))
    assert_logits_close(torch_logits(theirs, tokens), torch_logits(models(family)[1], tokens))


def test_gpt_oss_mxfp4_gguf_matches_the_dequantized_checkpoint(tmp_path, tiny):
    """An MXFP4 gpt-oss checkpoint (Hub layout) -> GGUF with MXFP4 experts (llama.cpp's repacking)
    -> jaxeval: the logits of the float checkpoint holding transformers' dequantized values."""
    from jaxeval.models import load_model
    from jaxeval.models.weights.gguf_file import GGUFFile
    from tests.helpers.gguf_writer import write_gguf, write_mxfp4_variant
    from tests.models.common import assert_logits_close

    mxfp4_dir, float_dir = write_mxfp4_variant(tiny("gpt_oss"), str(tmp_path))
    path = write_gguf(mxfp4_dir, str(tmp_path / "gpt_oss.mxfp4.gguf"))
    types = {GGUFFile(path).type_name(f"blk.0.ffn_{p}_exps.weight") for p in ("gate", "up", "down")}
    assert types == {"MXFP4"}
    tokens = np.random.default_rng(2).integers(1, 500, size=(2, 24)).astype(np.int32)
    ours = _moe_logits(load_model(path), tokens)
    assert_logits_close(ours, _moe_logits(load_model(float_dir), tokens), "gpt_oss mxfp4")


def test_stacked_experts_are_dequantized_once_per_run(tmp_path, tiny, monkeypatch):
    """A layer's X per-expert reads dequantize its stacked tensor once; a smaller budget splits
    the experts into runs, each read once; answers equal the stacked tensor's rows."""
    from jaxeval.models.weights.gguf import GGUFCheckpoint, load_config
    from tests.helpers.gguf_writer import write_gguf

    path = write_gguf(tiny("qwen3_moe"), str(tmp_path / "q.gguf"))
    f = GGUFFile(path)
    stacked = f.read("blk.1.ffn_up_exps.weight")  # [X, F, D] = [8, 32, 64]
    reads: list[tuple[str, slice | None]] = []
    read = GGUFFile.read

    def counting(self, name, rows=None):
        reads.append((name, rows))
        return read(self, name, rows)

    monkeypatch.setattr(GGUFFile, "read", counting)
    per_expert = 32 * 64 * 4
    for budget, runs in (
        (1 << 30, [slice(0, 8)]),
        (3 * per_expert, [slice(0, 3), slice(3, 6), slice(6, 8)]),
    ):
        reads.clear()
        ckpt = GGUFCheckpoint(f, load_config(f), expert_cache_bytes=budget)
        for e in range(8):
            name = f"model.layers.1.mlp.experts.{e}.up_proj.weight"
            assert name in ckpt and ckpt.shape(name) == (32, 64)
            np.testing.assert_array_equal(ckpt.read(name), stacked[e])
        assert reads == [("blk.1.ffn_up_exps.weight", run) for run in runs]
    assert "model.layers.1.mlp.experts.8.up_proj.weight" not in ckpt  # only 8 experts


@pytest.mark.parametrize(
    "arch,metadata,named",
    [
        ("deepseek2", {}, "'deepseek2' is a Mixture of Experts"),
        ("llama", {"expert_count": 8}, "holds a Mixture of Experts (8 experts)"),  # Mixtral
    ],
)
def test_moe_gguf_without_a_config_table_is_a_clear_error(tmp_path, arch, metadata, named):
    from jaxeval.models import load_model
    from tests.helpers.gguf_writer import write_arch_only_gguf

    path = write_arch_only_gguf(str(tmp_path / f"{arch}.gguf"), arch, **metadata)
    with pytest.raises(JaxevalError) as err:
        load_model(path)
    text = str(err.value)
    assert named in text and "safetensors checkpoint" in text and "qwen3moe" in text
