"""MXFP4 expert weights (gpt-oss): dequantized to float32 in Hugging Face's layout.

MXFP4 stores blocks of 32 values as 32 FP4 (e2m1) codes and one shared power-of-two scale (e8m0,
bias 127). A code's value is `FP4_VALUES[code] * 2 ** (scale - 127)`:

    code   0    1    2    3    4    5    6    7    8    9    10   11   12   13   14   15
    value  0   .5    1  1.5    2    3    4    6   -0  -.5   -1 -1.5   -2   -3   -4   -6

Two byte layouts hold the same numbers:

- **Hugging Face safetensors** (gpt-oss on the Hub): `<name>_blocks` uint8 [X, R, G, 16] and
  `<name>_scales` uint8 [X, R, G] for the weight `<name>` [X, G*32, R] (X experts; R output rows;
  G blocks along the input axis). Byte j of a block holds values 2j (low nibble) and 2j + 1 (high
  nibble). transformers (`integrations/mxfp4.py`, `convert_moe_packed_tensors`) decodes each row to
  [G*32] values, then swaps the last two axes: `gate_up_proj_blocks` [X, 2F, D/32, 16] ->
  `gate_up_proj` [X, D, 2F]; `down_proj_blocks` [X, D, F/32, 16] -> `down_proj` [X, F, D].

      one row, G = 1: bytes [0x21, 0x43, ...] -> codes [1, 2, 3, 4, ...] -> [.5, 1, 1.5, 2, ...] * 2**e

- **GGML** (GGUF type MXFP4, id 39): 17-byte blocks, the scale byte first, then 16 bytes in which
  byte j holds value j (low nibble) and value j + 16 (high nibble). Rows run along the input axis
  like every GGUF matrix.

      one block: [e, 0x51, 0x62, ...] -> values [1 2 ... | 5 6 ...] (positions 0, 1, ... and 16, 17, ...)

`MXFP4Reader` wraps a checkpoint reader so that a gpt-oss checkpoint's `_blocks` / `_scales` pairs
read as the dequantized `gate_up_proj` / `down_proj` tensors the weight map names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxeval.models.weights import hf as hf_weights

FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)
SCALE_BIAS = 127
BLOCK = 32  # values per block (one scale)
GGML_BLOCK_BYTES = 17  # one scale byte + 16 bytes of codes
BLOCKS_SUFFIX, SCALES_SUFFIX = "_blocks", "_scales"
CHUNK_VALUES = 1 << 22  # values decoded per step (16 MiB of float32)


def _byte_pairs(values: np.ndarray) -> np.ndarray:
    """byte -> its two values (low nibble's, high nibble's) packed as one uint64: [256].

    One gather per byte with an intp index is several times faster than two nibble lookups."""
    codes = np.arange(256)
    pairs = np.stack([values[codes & 0x0F], values[codes >> 4]], axis=-1)  # [256, 2]
    return np.ascontiguousarray(pairs, dtype=np.float32).view(np.uint64).reshape(256)


_HF_PAIRS = _byte_pairs(FP4_VALUES)
# GGML's table has +0 for code 8 where transformers' has -0 (adding +0 turns -0 into +0).
_GGML_PAIRS = _byte_pairs(FP4_VALUES + np.float32(0.0))
# 2 ** (scale - 127) as float32, except scale 255 (2 ** 128 overflows): 2 ** 127, then doubled in
# `_scale`. Multiplying by a power of two is exact, so this equals ldexp(value, scale - 127).
_POWERS = np.ldexp(np.float32(1.0), np.minimum(np.arange(256), 254) - SCALE_BIAS).astype(np.float32)


def _scale(values: np.ndarray, scales: np.ndarray) -> None:
    """values [..., 32] *= 2 ** (scales[...] - 127) in place: exact, inf where it overflows."""
    with np.errstate(over="ignore"):
        values *= _POWERS[scales.astype(np.intp)][..., None]
        top = scales == 255
        if top.any():
            values[top] *= np.float32(2.0)


def _decode_rows(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF blocks [r, G, 16] and scales [r, G] -> float32 [r, G*32], in row order."""
    r, g, _ = blocks.shape
    values = _HF_PAIRS[blocks.astype(np.intp)].view(np.float32).reshape(r, g, BLOCK)
    _scale(values, scales)
    return values.reshape(r, g * BLOCK)


def dequantize_mxfp4(
    blocks: np.ndarray, scales: np.ndarray, *, chunk_values: int = CHUNK_VALUES
) -> np.ndarray:
    """HF MXFP4 `blocks` uint8 [..., R, G, 16] and `scales` uint8 [..., R, G] -> float32 [..., G*32, R].

    Exactly transformers' dequantized tensor (its bfloat16 values are these float32 values), e.g.
    `gate_up_proj_blocks` [X, 2F, D/32, 16] -> `gate_up_proj` [X, D, 2F]. Memory beyond the result:
    one expert's [R, G*32] rows plus `chunk_values` values of temporaries.
    """
    blocks, scales = np.asarray(blocks), np.asarray(scales)
    if (
        blocks.dtype != np.uint8
        or scales.dtype != np.uint8
        or blocks.ndim < 3
        or blocks.shape[-1] != BLOCK // 2
        or blocks.shape[:-1] != scales.shape
    ):
        raise ValueError(
            f"MXFP4 blocks {blocks.dtype}{list(blocks.shape)} and scales "
            f"{scales.dtype}{list(scales.shape)} do not pair up: expected uint8 [..., R, G, 16] "
            "and uint8 [..., R, G]"
        )
    *lead, rows, groups, _ = blocks.shape
    out = np.empty((*lead, groups * BLOCK, rows), np.float32)
    flat_blocks = blocks.reshape(-1, rows, groups, BLOCK // 2)
    flat_scales = scales.reshape(-1, rows, groups)
    flat_out = out.reshape(-1, groups * BLOCK, rows)
    step = max(1, chunk_values // max(1, groups * BLOCK))
    expert = np.empty((rows, groups * BLOCK), np.float32)  # one expert, rows first
    for x in range(flat_blocks.shape[0]):
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            expert[start:stop] = _decode_rows(
                flat_blocks[x, start:stop], flat_scales[x, start:stop]
            )
        hf_weights.transpose(expert, out=flat_out[x])
    return out


def dequantize_ggml_mxfp4(raw: np.ndarray) -> np.ndarray:
    """GGML MXFP4 rows uint8 [n, k*17] -> float32 [n, k*32] (the `gguf` package's values, bit for bit)."""
    raw = np.asarray(raw, dtype=np.uint8)
    n = raw.shape[0]
    blocks = raw.reshape(-1, GGML_BLOCK_BYTES)
    pairs = _GGML_PAIRS[blocks[:, 1:].astype(np.intp)].view(np.float32)  # (blocks, 32)
    values = np.ascontiguousarray(pairs.reshape(-1, BLOCK // 2, 2).swapaxes(1, 2))  # low | high
    values = values.reshape(-1, BLOCK)
    _scale(values, blocks[:, 0])
    return values.reshape(n, -1)


def mxfp4_pairs(names: Any) -> dict[str, tuple[str, str]]:
    """Which tensors a checkpoint stores as MXFP4: {name: (name_blocks, name_scales)}.

    mxfp4_pairs(["l.0.experts.down_proj_blocks", "l.0.experts.down_proj_scales", "l.0.x.weight"])
      -> {"l.0.experts.down_proj": ("l.0.experts.down_proj_blocks", "l.0.experts.down_proj_scales")}

    A name stored plainly as well keeps its plain tensor (no pair).
    """
    present = set(names)
    pairs = {}
    for name in sorted(present):
        if not name.endswith(BLOCKS_SUFFIX):
            continue
        base = name[: -len(BLOCKS_SUFFIX)]
        if base + SCALES_SUFFIX in present and base not in present:
            pairs[base] = (name, base + SCALES_SUFFIX)
    return pairs


class MXFP4Reader:
    """A checkpoint reader whose MXFP4 pairs read as their dequantized float32 tensors.

    reader = MXFP4Reader(CheckpointReader(path))
    reader.shape("model.layers.0.mlp.experts.gate_up_proj")     -> (32, 2880, 5760)
    reader.read("model.layers.0.mlp.experts.down_proj", rows=slice(0, 4))  -> float32 [4, F, D]

    `rows` slices the experts (the first axis): only their blocks are read and decoded. Every other
    name (the `_blocks` / `_scales` tensors too) passes through to the wrapped reader.
    """

    def __init__(self, reader: Any):
        self.reader = reader
        self.pairs = mxfp4_pairs(reader.names)

    @property
    def names(self) -> list[str]:
        """The checkpoint's names as a dequantized checkpoint holds them (pairs -> one name)."""
        packed = {part for pair in self.pairs.values() for part in pair}
        return sorted({*(n for n in self.reader.names if n not in packed), *self.pairs})

    def __contains__(self, name: str) -> bool:
        return name in self.pairs or name in self.reader

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.pairs:
            return tuple(self.reader.shape(name))
        *lead, rows, groups, _ = self.reader.shape(self.pairs[name][0])
        return (*lead, groups * BLOCK, rows)

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        if name not in self.pairs:
            return self.reader.read(name, rows)
        blocks, scales = self.pairs[name]
        return dequantize_mxfp4(self.reader.read(blocks, rows), self.reader.read(scales, rows))


def with_mxfp4(reader: Any) -> Any:
    """`reader` wrapped in `MXFP4Reader` when its checkpoint holds MXFP4 pairs; else `reader`."""
    return MXFP4Reader(reader) if mxfp4_pairs(reader.names) else reader
