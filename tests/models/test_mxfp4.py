"""MXFP4: our dequantizers against transformers' and gguf's, the pair finder, and `MXFP4Reader`
loading a Hub-layout gpt-oss checkpoint to the logits of its dequantized twin."""

from __future__ import annotations

import numpy as np
import pytest

from jaxeval.models.weights.mxfp4 import (
    FP4_VALUES,
    MXFP4Reader,
    dequantize_ggml_mxfp4,
    dequantize_mxfp4,
    mxfp4_pairs,
    with_mxfp4,
)

EXTREME_SCALES = (0, 1, 126, 127, 128, 254, 255)  # subnormal results, 1.0, overflow to inf


def _random_blocks(rng: np.random.Generator, shape: tuple[int, ...]):
    """uint8 blocks [*shape, 16] and scales [*shape], some scales at the extremes of e8m0."""
    blocks = rng.integers(0, 256, size=(*shape, 16), dtype=np.uint8)
    scales = rng.integers(110, 140, size=shape, dtype=np.uint8)
    scales.reshape(-1)[: len(EXTREME_SCALES)] = EXTREME_SCALES
    return blocks, scales


def test_one_block_golden():
    """Bytes 0x21, 0x43: codes 1, 2, 3, 4 (low nibble first) -> .5, 1, 1.5, 2, times 2^(129-127)."""
    blocks = np.zeros((1, 1, 1, 16), np.uint8)
    blocks[0, 0, 0, :2] = [0x21, 0x43]
    blocks[0, 0, 0, 2] = 0xF8  # codes 8 (-0) and 15 (-6)
    out = dequantize_mxfp4(blocks, np.full((1, 1, 1), 129, np.uint8))
    assert out.shape == (1, 32, 1)  # [X, G*32, R]: rows last
    np.testing.assert_array_equal(out[0, :6, 0], [2, 4, 6, 8, -0.0, -24])
    assert np.signbit(out[0, 4, 0]) and not out[0, 6:, 0].any()


@pytest.mark.parametrize("chunk_values", [64, 1 << 22])
def test_dequantize_is_bit_exact_with_transformers(chunk_values):
    """`dequantize_mxfp4` == transformers' `convert_moe_packed_tensors` (float32), bit for bit,
    in its [X, G*32, R] layout, chunked or not; its bfloat16 result holds the same values."""
    torch = pytest.importorskip("torch")
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    blocks, scales = _random_blocks(np.random.default_rng(0), (3, 40, 4))  # X=3, R=40, G=4
    ours = dequantize_mxfp4(blocks, scales, chunk_values=chunk_values)
    args = (torch.from_numpy(blocks), torch.from_numpy(scales))
    theirs = convert_moe_packed_tensors(*args, dtype=torch.float32).numpy()
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (3, 128, 40)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    bf16 = convert_moe_packed_tensors(*args, dtype=torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(bf16, ours)


def test_ggml_blocks_are_bit_exact_with_gguf():
    """GGML's layout (scale byte, then low nibbles = values 0-15, high = 16-31) == gguf's reference."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, size=(6, 4 * 17), dtype=np.uint8)
    raw.reshape(-1, 17)[: len(EXTREME_SCALES), 0] = EXTREME_SCALES
    ours = dequantize_ggml_mxfp4(raw)
    with np.errstate(over="ignore"):  # scale 255 overflows to inf, as ours does
        theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.MXFP4).astype(np.float32)
    assert ours.shape == (6, 128)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    one = np.zeros((1, 17), np.uint8)
    one[0, :3] = [127, 0x51, 0x62]  # codes 1, 2 at positions 0, 1; codes 5, 6 at 16, 17
    values = dequantize_ggml_mxfp4(one)[0]
    assert list(values[[0, 1, 16, 17]]) == [0.5, 1.0, 3.0, 4.0] == list(FP4_VALUES[[1, 2, 5, 6]])


def test_pairs_and_shape_errors():
    names = [
        "l.0.experts.down_proj_blocks",
        "l.0.experts.down_proj_scales",
        "l.0.experts.gate_up_proj_blocks",  # no scales: not a pair
        "l.1.experts.down_proj",  # stored plainly as well: the plain tensor wins
        "l.1.experts.down_proj_blocks",
        "l.1.experts.down_proj_scales",
        "l.0.attn.weight",
    ]
    assert mxfp4_pairs(names) == {
        "l.0.experts.down_proj": ("l.0.experts.down_proj_blocks", "l.0.experts.down_proj_scales")
    }
    with pytest.raises(ValueError, match="do not pair up"):
        dequantize_mxfp4(np.zeros((2, 3, 16), np.uint8), np.zeros((2, 4), np.uint8))


class _DictReader:
    """The reader interface over a dict of arrays, counting reads."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self.tensors, self.reads = tensors, []

    @property
    def names(self) -> list[str]:
        return sorted(self.tensors)

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        self.reads.append((name, rows))
        return self.tensors[name] if rows is None else self.tensors[name][rows]


def test_reader_answers_dequantized_names_and_passes_the_rest_through():
    blocks, scales = _random_blocks(np.random.default_rng(2), (4, 6, 2))  # X=4, R=6, D=64
    bias = np.arange(24, dtype=np.float32).reshape(4, 6)
    inner = _DictReader(
        {
            "e.gate_up_proj_blocks": blocks,
            "e.gate_up_proj_scales": scales,
            "e.gate_up_proj_bias": bias,
        }
    )
    reader = with_mxfp4(inner)
    assert isinstance(reader, MXFP4Reader)
    assert reader.names == ["e.gate_up_proj", "e.gate_up_proj_bias"]
    assert "e.gate_up_proj" in reader and "e.gate_up_proj_blocks" in reader
    assert "e.down_proj" not in reader
    assert reader.shape("e.gate_up_proj") == (4, 64, 6)
    full = dequantize_mxfp4(blocks, scales)
    np.testing.assert_array_equal(reader.read("e.gate_up_proj"), full)
    inner.reads.clear()
    np.testing.assert_array_equal(reader.read("e.gate_up_proj", slice(1, 3)), full[1:3])
    assert inner.reads == [
        ("e.gate_up_proj_blocks", slice(1, 3)),  # only experts 1 and 2 are read and decoded
        ("e.gate_up_proj_scales", slice(1, 3)),
    ]
    np.testing.assert_array_equal(reader.read("e.gate_up_proj_bias"), bias)
    assert reader.shape("e.gate_up_proj_bias") == (4, 6)
    plain = _DictReader({"w": bias})
    assert with_mxfp4(plain) is plain  # nothing packed: the reader itself


def test_hub_layout_gpt_oss_loads_to_its_dequantized_logits(tmp_path, tiny, monkeypatch):
    """A gpt-oss checkpoint with MXFP4 experts (`_blocks` / `_scales`), read through `MXFP4Reader`
    wired in front of the loader's `CheckpointReader`, gives the logits of its float twin, and
    transformers' own load of the MXFP4 checkpoint (dequantized on CPU) agrees."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from jaxeval.models import load_model, loader
    from tests.helpers.gguf_writer import write_mxfp4_variant
    from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits

    mxfp4_dir, float_dir = write_mxfp4_variant(tiny("gpt_oss"), str(tmp_path))
    plain = loader.CheckpointReader
    monkeypatch.setattr(loader, "CheckpointReader", lambda path: with_mxfp4(plain(path)))
    tokens = np.random.default_rng(3).integers(1, 500, size=(2, 24)).astype(np.int32)
    results = []
    for path in (mxfp4_dir, float_dir):
        loaded = load_model(path)
        results.append(
            np.asarray(logits_fn(loaded.spec, loaded.params, tokens, *full_rows(tokens)))
        )
    assert_logits_close(results[0], results[1], "mxfp4 vs float")
    theirs = AutoModelForCausalLM.from_pretrained(
        mxfp4_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert_logits_close(results[0], torch_logits(theirs, tokens), "mxfp4 vs transformers")
