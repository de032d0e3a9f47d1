"""lm-eval's bootstrap draws in C++: `bootstrap_kernel.cc`, built once per machine, called by
`jaxeval.metrics.resample` through ctypes.

One `Stream` is `random.Random(seed)` read as `choices` draws (one `random()` per draw, index
`floor(random() * n)`, the module doc of `jaxeval.metrics.resample`):

    Stream(lib, [0]).indices(3, out)     # Random(0): out[:] = 2, 2, 1, 0, 1, 1, ... (n = 3)
    Stream(lib, key).row_sums(n, rows, columns, outs, compensated=False)
        # outs[k][r] = sum(columns[k][i] for i in the stream's next replicate r), added as the
        # interpreter's `sum` adds floats: left to right from 0.0 (Python 3.11), or Neumaier's
        # compensated sum (3.12+) with `compensated=True`

The kernel twists MT19937 and converts 8 draws at a time with AVX-512, 4 with AVX2, and
sums 8 replicates side by side, each in its own chain and its own order: every double is the one
the interpreter computes, bit for bit (no fused or reassociated operations: `-ffp-contract=off`,
no fast-math). LAMBADA's case, 100,000 replicates of 5,153 draws, takes ~0.45 s on one core
against ~3.4 s for NumPy's generator and row sums (docs/performance.md, "The bootstrap").

The build: `$CXX` (else c++, g++ or clang++) with `FLAGS`, into `<cache_home>/kernels/` (0700)
under a name hashing the source, the compiler, the flags and the CPU model, written to a temporary
file and renamed into place (concurrent processes are safe), 0600 with its sha256 beside it: ~0.7 s
once; later loads take ~3 ms. A library that is not this user's, is writable by others, or no
longer matches its sha256 is built again, never loaded (`jaxeval.paths.load_native`).
Without a compiler, or when the build or load fails, `load_kernel()` returns None (logged once at
debug level) and the caller uses NumPy.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxeval import paths

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("bootstrap_kernel.cc")
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
         "-std=c++17")  # fmt: skip
# The kernel keeps each replicate's indices as int32.
MAX_DOCUMENTS = 2**31 - 1
_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": the loaded library or None once tried, "error": why not

_p = ctypes.c_void_p
_i64 = ctypes.c_int64
_SIGNATURES = {
    "jaxeval_bootstrap_stream_size": ([], _i64),
    "jaxeval_bootstrap_seed": ([_p, _p, _i64], None),
    "jaxeval_bootstrap_indices": ([_p, _i64, _i64, _p], None),
    "jaxeval_bootstrap_row_sums": ([_p, _i64, _i64, _p, _i64, ctypes.c_int, _p], ctypes.c_int),
}


cxx_compiler = paths.cxx_compiler  # the C++ compiler a build would use (None: none found)


def kernel_path(compiler: str) -> Path:
    """Where the kernel built by `compiler` lives (or will)."""
    return paths.native_path("bootstrap", SOURCE, compiler, FLAGS)


def _build(compiler: str, target: Path) -> None:
    paths.build_native(compiler, FLAGS, SOURCE, target)


def _open() -> ctypes.CDLL:
    found = cxx_compiler()
    if found is None:
        raise RuntimeError("no C++ compiler found (tried $CXX, c++, g++, clang++)")

    def build(target: Path) -> None:
        log.debug("building the bootstrap kernel into %s", target)
        _build(found, target)

    lib = paths.load_native(kernel_path(found), build, lambda p: ctypes.CDLL(str(p)))
    for name, (args, result) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


def load_kernel() -> ctypes.CDLL | None:
    """The kernel library, built on the first call in a process (None: no compiler, or the build
    or load failed; `kernel_error()` says why)."""
    with _lock:
        if "lib" not in _state:
            try:
                _state["lib"] = _open()
            except Exception as err:  # noqa: BLE001 - any failure falls back to NumPy
                log.debug("bootstrap kernel unavailable, drawing with NumPy: %s", err)
                _state.update(lib=None, error=str(err))
        return _state["lib"]  # type: ignore[return-value]


def kernel_available() -> bool:
    """Whether the kernel is built and loaded (builds it on the first call, once per process)."""
    return load_kernel() is not None


def kernel_error() -> str | None:
    """Why the kernel is unavailable (None: it loaded, or no load was tried)."""
    return _state.get("error")  # type: ignore[return-value]


class Stream:
    """`random.Random(seed)`'s Mersenne Twister, read as `choices` draws; `key` holds the 32-bit
    words of abs(seed), least significant first (`jaxeval.metrics.resample.seed_key`)."""

    def __init__(self, lib: ctypes.CDLL, key: Sequence[int]) -> None:
        self._lib = lib
        self._state = np.zeros(lib.jaxeval_bootstrap_stream_size(), dtype=np.uint8)
        words = np.array(key, dtype=np.uint32)
        lib.jaxeval_bootstrap_seed(self._state.ctypes.data, words.ctypes.data, len(words))

    def indices(self, n: int, out: np.ndarray) -> None:
        """Fills `out` (C-contiguous int64, any shape) with the next `out.size` draws below `n`."""
        if out.dtype != np.int64 or not out.flags.c_contiguous:
            raise ValueError("out must be a C-contiguous int64 array")
        self._lib.jaxeval_bootstrap_indices(self._state.ctypes.data, n, out.size, out.ctypes.data)

    def row_sums(
        self,
        n: int,
        rows: int,
        columns: Sequence[np.ndarray],
        outs: Sequence[np.ndarray],
        *,
        compensated: bool,
    ) -> None:
        """Draws the next `rows` replicates of `n` documents and writes each column's sum over
        each replicate's documents into `outs[k][:rows]` ([n] and [rows] float64, C-contiguous)."""
        if not 1 <= n <= MAX_DOCUMENTS:
            raise ValueError(f"need 1 <= n <= {MAX_DOCUMENTS}, got {n}")
        if len(columns) != len(outs):
            raise ValueError(f"{len(columns)} columns but {len(outs)} outputs")
        for a, size in [(c, n) for c in columns] + [(o, rows) for o in outs]:
            if a.dtype != np.float64 or not a.flags.c_contiguous or a.shape != (size,):
                raise ValueError("columns and outs must be C-contiguous float64 vectors")
        inputs = (ctypes.c_void_p * len(columns))(*(c.ctypes.data for c in columns))
        results = (ctypes.c_void_p * len(outs))(*(o.ctypes.data for o in outs))
        done = self._lib.jaxeval_bootstrap_row_sums(
            self._state.ctypes.data, n, rows, inputs, len(columns), int(compensated), results
        )
        if done != 0:
            raise MemoryError(f"the bootstrap kernel could not allocate {8 * 4 * n} bytes")
