"""Reading safetensors checkpoints (one file or a sharded index) by row ranges, any dtype incl. bf16.

A safetensors file is `u64 header length | JSON header | raw little-endian data`. We parse the header
and read tensors with positioned reads into fresh numpy buffers: `reader.read(name, rows=slice(a, b))`
reads only rows a:b of a tensor (one contiguous byte range), so an embedding shard costs just its
rows, and nothing stays mapped or cached by us after the read. (The `safetensors` package's numpy
backend cannot return bfloat16, hence this small reader; `ml_dtypes` supplies the numpy bfloat16
type and ships with jax.)

    model.safetensors                        one file
    model.safetensors.index.json             {"weight_map": {tensor name: shard file name}}
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import ml_dtypes
import numpy as np

from jaxeval.errors import JaxevalError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


class _File:
    """One safetensors file: tensor name -> (dtype, shape, byte range); positioned reads."""

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            try:
                if not 0 < n <= size - 8:
                    raise ValueError(f"header length {n} does not fit a {size}-byte file")
                header = json.loads(f.read(n))
                if not isinstance(header, dict):
                    raise ValueError("the header is not a JSON object")
            except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
                raise JaxevalError(
                    f"the safetensors header is unreadable ({e}): the file is truncated or corrupt",
                    file=path,
                    hint="download the weights again (compare the file size with the source)",
                ) from None
        self.metadata = header.pop("__metadata__", None) or {}
        self.entries = header
        self.data_start = 8 + n

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name]["shape"])

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        """Rows `rows` (a step-1 slice of the first axis; all when None) as a new numpy array."""
        entry = self.entries[name]
        if entry["dtype"] not in _DTYPES:
            raise JaxevalError(
                f"tensor {name!r} has unsupported dtype {entry['dtype']}", file=self.path
            )
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        shape = tuple(entry["shape"])
        start, stop = entry["data_offsets"]
        if rows is not None and shape:
            first, last, step = rows.indices(shape[0])
            if step != 1:
                raise ValueError("only step-1 row slices are supported")
            row_bytes = (stop - start) // shape[0] if shape[0] else 0
            start, stop = start + first * row_bytes, start + max(last, first) * row_bytes
            shape = (max(last - first, 0), *shape[1:])
        out = np.empty(shape, dtype)
        view = memoryview(out.reshape(-1).view(np.uint8)) if out.size else None
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.data_start + start)
            done = 0
            while view is not None and done < stop - start:
                got = f.readinto(view[done:])
                if not got:
                    raise JaxevalError(f"tensor {name!r} is truncated", file=self.path)
                done += got
        return out


class CheckpointReader:
    """Tensor lookup over a checkpoint directory; `get(name)` returns a lazy memory-mapped view."""

    def __init__(self, directory: str):
        self.directory = directory
        index_path = os.path.join(directory, INDEX_FILE)
        single_path = os.path.join(directory, SINGLE_FILE)
        self._files: dict[str, _File] = {}
        self._where: dict[str, str] = {}
        if os.path.isfile(index_path):
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            missing = sorted(
                {s for s in weight_map.values() if not os.path.isfile(os.path.join(directory, s))}
            )
            if missing:
                raise JaxevalError(
                    f"checkpoint shard(s) listed in {INDEX_FILE} are missing: {', '.join(missing)}",
                    file=directory,
                    hint="download the complete checkpoint (all shards) into that directory",
                )
            self._where = dict(weight_map)
        elif os.path.isfile(single_path):
            self._where = {name: SINGLE_FILE for name in self._file(SINGLE_FILE).entries}
        else:
            present = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
            legacy = [p for p in present if p.endswith((".bin", ".pt", ".pth", ".msgpack", ".h5"))]
            hint = f"expected {SINGLE_FILE} or {INDEX_FILE} in the directory"
            if legacy:
                hint += f"; found only non-safetensors weights ({', '.join(legacy)}): convert them"
            raise JaxevalError(
                f"no safetensors weights found (missing {SINGLE_FILE} / {INDEX_FILE})",
                file=directory,
                hint=hint,
            )

    def _file(self, shard: str) -> _File:
        if shard not in self._files:
            self._files[shard] = _File(os.path.join(self.directory, shard))
        return self._files[shard]

    @property
    def names(self) -> list[str]:
        return sorted(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(self._where[name]).shape(name)

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        """The tensor (or rows `rows` of it) as a fresh numpy array in its stored dtype."""
        if name not in self._where:
            raise KeyError(name)
        return self._file(self._where[name]).read(name, rows)
