"""Reading a GGUF file (llama.cpp's format): metadata, tensor table, and rows dequantized to float32.

A GGUF file is a little-endian header, then aligned tensor data:

    "GGUF" u32 version | u64 n_tensors | u64 n_kv
    n_kv x   (key: u64 len + utf-8) | u32 value type | value      (type 9 = array: u32 type, u64 n, items)
    n_tensors x (name) | u32 n_dims | n_dims x u64 ne (innermost first) | u32 ggml type | u64 offset
    padding to `general.alignment` (32) | tensor data (each tensor at data_start + offset)

A 2-D tensor with ne = [576, 1536] is 1536 rows of 576 values, i.e. numpy shape (1536, 576): the
same [out, in] layout as a torch Linear weight. Quantized rows are whole blocks (Q4_1: 32 values in
20 bytes), so row r of a quantized tensor is one contiguous byte range:

    Q4_1, ne = [576, 1536]: row bytes = 576 / 32 * 20 = 360; rows 8:10 = bytes [2880, 3600)

`GGUFFile.read(name, rows)` memory-maps the file and dequantizes only the rows asked for, with the
`gguf` package's reference dequantizers (MXFP4, gpt-oss's expert type, with `mxfp4.py`'s: the same
values, faster, and there whether or not the installed `gguf` knows the type), so a shard of the
embedding costs just its rows. The header is parsed here (not with `gguf.GGUFReader`, which takes
seconds on a 49k-token vocabulary).
"""

from __future__ import annotations

import functools
import os
import struct
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.models.weights import mxfp4

_MAGIC = b"GGUF"
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_NUMPY = {
    0: np.uint8,
    1: np.int8,
    2: np.uint16,
    3: np.int16,
    4: np.uint32,
    5: np.int32,
    6: np.float32,
    7: np.bool_,
    10: np.uint64,
    11: np.int64,
    12: np.float64,
}

# GGML types dequantized here rather than by the `gguf` package: id -> (name, block values, block
# bytes, dequantize(uint8 (n, row bytes)) -> float32 (n, row values)). 39 is ggml.h's GGML_TYPE_MXFP4.
_OWN_TYPES = {39: ("MXFP4", mxfp4.BLOCK, mxfp4.GGML_BLOCK_BYTES, mxfp4.dequantize_ggml_mxfp4)}


def _quant_api() -> Any:
    import gguf  # imported lazily: only GGUF loading needs it
    import gguf.quants

    return gguf


@functools.cache
def dequantizable_types() -> dict[int, str]:
    """GGML type id -> name for every type we can turn into floats (plain floats + gguf's quants)."""
    g = _quant_api()
    names = {g.GGMLQuantizationType.F32, g.GGMLQuantizationType.F16, g.GGMLQuantizationType.BF16}
    names |= set(g.quants._type_traits)
    return {int(t): t.name for t in names} | {k: v[0] for k, v in _OWN_TYPES.items()}


class _Cursor:
    """Sequential little-endian reads over the start of a file, read in growing chunks.

    (Plain bytes, not memmap slices: a 49k-token vocabulary is ~200k small reads.)
    """

    def __init__(self, path: str, chunk: int = 4 << 20):
        self.path, self.pos = path, 0
        self.size = os.path.getsize(path)
        self.chunk = chunk
        with open(path, "rb") as f:
            self.buf = f.read(chunk)

    def take(self, n: int) -> bytes:
        while self.pos + n > len(self.buf) and len(self.buf) < self.size:
            self.chunk *= 2
            with open(self.path, "rb") as f:
                self.buf = f.read(self.chunk)
        if self.pos + n > len(self.buf):
            raise JaxevalError(
                "the GGUF header is truncated",
                file=self.path,
                hint="the file is incomplete: download it again",
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.scalar("<Q"))
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item, n = self.scalar("<I"), self.scalar("<Q")
            if item in _NUMPY:  # numeric arrays in one read
                dtype = np.dtype(_NUMPY[item])
                return np.frombuffer(self.take(n * dtype.itemsize), dtype).tolist()
            return [self.value(item) for _ in range(n)]
        raise JaxevalError(
            f"unknown GGUF metadata value type {vtype}",
            file=self.path,
            hint="the file is corrupt or from a newer GGUF version",
        )


class GGUFFile:
    """One GGUF file: `metadata` (key -> Python value), tensor table, and row reads.

    f = GGUFFile("model.gguf")
    f.metadata["general.architecture"]      -> 'llama'
    f.shape("blk.0.attn_q.weight")           -> (576, 576)
    f.type_name("blk.0.attn_q.weight")       -> 'Q4_1'
    f.read("token_embd.weight", slice(0, 8)) -> float32 (8, 576)
    """

    def __init__(self, path: str):
        self.path = path
        if not os.path.isfile(path):
            raise JaxevalError(
                "GGUF file not found",
                file=path,
                hint="pass pretrained=DIR,gguf_file=NAME.gguf or a path to a .gguf file",
            )
        cur = _Cursor(path)
        if cur.buf[:4] != _MAGIC:
            raise JaxevalError(
                "not a GGUF file (no 'GGUF' magic at its start)",
                file=path,
                hint="pass a .gguf file written by llama.cpp or the gguf package",
            )
        cur.take(4)
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        self.version = cur.scalar("<I")
        if self.version not in (2, 3):
            raise JaxevalError(
                f"GGUF version {self.version} is not supported (2 and 3 are)", file=path
            )
        n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.scalar("<I"))
        # name -> (numpy shape, ggml type, offset from data start)
        self.tensors: dict[str, tuple[tuple[int, ...], int, int]] = {}
        for _ in range(n_tensors):
            name = cur.string()
            ne = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
            ggml_type, offset = cur.scalar("<I"), cur.scalar("<Q")
            self.tensors[name] = (tuple(reversed(ne)), ggml_type, offset)
        align = self.metadata.get("general.alignment", 32)
        if (
            isinstance(align, bool)
            or not isinstance(align, int)
            or align <= 0
            or align & (align - 1)
        ):
            raise JaxevalError(
                f"general.alignment is {align!r}; GGUF requires a power of two (32 by default)",
                file=path,
                field="general.alignment",
                hint="the file is corrupt: download it again, or rewrite it with llama.cpp",
            )
        self.data_start = -(-cur.pos // align) * align

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][0]

    def type_name(self, name: str) -> str:
        ggml_type = self.tensors[name][1]
        return dequantizable_types().get(ggml_type, f"type id {ggml_type}")

    def check_types(self) -> None:
        """Raises naming the first tensor whose GGML type we cannot dequantize."""
        known = dequantizable_types()
        for name, (_, ggml_type, _) in self.tensors.items():
            if ggml_type not in known:
                g = _quant_api()
                try:
                    label = g.GGMLQuantizationType(ggml_type).name
                except ValueError:
                    label = f"unknown GGML type id {ggml_type}"
                raise JaxevalError(
                    f"tensor {name!r} is stored as {label}, which cannot be dequantized",
                    file=self.path,
                    hint=f"supported types: {', '.join(sorted(known.values()))}; "
                    "re-quantize the model to one of them (e.g. with llama.cpp's llama-quantize)",
                )

    def _raw_rows(self, name: str, rows: slice | None) -> tuple[np.ndarray, tuple[int, ...]]:
        """The stored bytes of rows `rows` as uint8 [n_rows, row_bytes], and their value shape."""
        g = _quant_api()
        shape, ggml_type, offset = self.tensors[name]
        if ggml_type in _OWN_TYPES:
            block, type_size = _OWN_TYPES[ggml_type][1:3]
        else:
            block, type_size = g.GGML_QUANT_SIZES[g.GGMLQuantizationType(ggml_type)]
        inner = shape[-1]
        if inner % block:
            raise JaxevalError(
                f"tensor {name!r}: row length {inner} is not a multiple of its block size {block}",
                file=self.path,
            )
        n_rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        row_bytes = inner // block * type_size
        first, last = 0, n_rows
        if rows is not None and len(shape) > 1:
            first, last, step = rows.indices(shape[0])
            if step != 1:
                raise ValueError("only step-1 row slices are supported")
            per_lead = n_rows // shape[0]
            first, last = first * per_lead, max(last, first) * per_lead
        start = self.data_start + offset + first * row_bytes
        stop = self.data_start + offset + last * row_bytes
        if stop > len(self._map):
            raise JaxevalError(
                f"tensor {name!r} extends past the end of the file",
                file=self.path,
                hint="the file is truncated: download it again",
            )
        raw = self._map[start:stop].reshape(last - first, row_bytes)
        lead = (last - first) // (n_rows // shape[0]) if len(shape) > 1 else None
        out_shape = (lead, *shape[1:]) if lead is not None else shape
        return raw, out_shape

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        """Rows `rows` (a step-1 slice of the first axis; all when None) as float32."""
        g = _quant_api()
        if name not in self.tensors:
            raise KeyError(name)
        ggml_type = self.tensors[name][1]
        if ggml_type not in dequantizable_types():
            self.check_types()
        raw, out_shape = self._raw_rows(name, rows)
        if ggml_type in _OWN_TYPES:
            values = _OWN_TYPES[ggml_type][3](np.asarray(raw))
        else:
            values = g.quants.dequantize(np.asarray(raw), g.GGMLQuantizationType(ggml_type))
        return np.asarray(values, dtype=np.float32).reshape(out_shape)
