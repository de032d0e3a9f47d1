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
from jaxeval.models.gguf_file import GGUFFile  # noqa: E402

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
    try:
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
