"""Fused attention kernels for XLA:CPU: `cpu_attention.cc`, built once per machine and called as
XLA FFI custom calls by the `cpu` attention backend (`jaxeval.models.attention.CpuAttention`):
one-token decode steps and packed rows (scoring, a prefill's own keys).

Why: XLA:CPU runs a decode step's attention as a loop of small ops per cache block and layer, at
~10 GB/s on one core; the decode kernel reads each row's K/V slab once, on every core of XLA's
thread pool (docs/performance.md, "The fused CPU decode attention"). XLA runs the blocked
attention of a long row as a scan of query blocks over a loop of key blocks, each a handful of
separate ops over a [Q, Q] score block; the packed kernel keeps each task's scores in L1 and its
scores, mask, online softmax and weighted values in registers, and its program has no loops to
compile (docs/performance.md, "The fused CPU prefill and scoring attention").

    cpu_decode_state(q [B, G, M, E], cache (k [L, B, G, E, C], v [L, B, G, C, E], valid,
                     positions [B, C]), layer, bound [B], q_pos [B], window, scale, softcap)
        -> (m, total [B, G, M], acc [B, G, M, E])

the online-softmax state over slots [0, bound[b]) (valid, within the window), which the decoder
folds the step's own key into;

    cpu_packed(q [B, T, H, E], k, v [B, T, G, E], mask, *, scale, softcap, init) -> out [B, T, H, E]

`blocked_attend`'s finished output under the packing rule (`mask.Mask`), its online softmax
starting from `init`. Whether a model uses them is chosen once, when it is loaded, by
`jaxeval.models.attention.select_attention` (the `cpu` backend).

The build: `$CXX` (else c++, g++ or clang++) `-O3 -march=native -ffp-contract=fast -shared -fPIC`
against jaxlib's FFI headers, into `<cache_home>/kernels/` (mode 0700) under a name hashing the source, the
compiler, the flags, jaxlib's version and the CPU model, written to a temporary file and renamed
into place (concurrent processes are safe), mode 0600 with its sha256 beside it: 4-5 s once on the
2-core CPU; later processes load the file. A library that is not this user's, is writable by
others, or no longer matches its sha256 (truncated, rewritten) is built again, never loaded
(`jaxeval.paths.load_native`).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import platform
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.ops.attention.mask import Mask, State
from jaxeval.paths import build_native, cxx_compiler, load_native, native_path

log = logging.getLogger(__name__)

TARGET = "jaxeval_decode_attention"
PACKED_TARGET = "jaxeval_packed_attention"
SOURCE = Path(__file__).with_name("cpu_attention.cc")
_FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC", "-std=c++17")
_lock = threading.Lock()
_state: dict[str, object] = {}  # "ok": bool once a build was tried, "error": why it failed


def available() -> bool:
    """Whether the kernels are built and registered (builds them on the first call, once per
    process); `jaxeval.models.attention.select_attention` asks it when it chooses."""
    return _ensure_registered()


def build_error() -> str | None:
    """Why the last build failed (None: no build failed)."""
    return _state.get("error")  # type: ignore[return-value]


compiler = cxx_compiler  # the C++ compiler a build would use (None: none found)


def library_path(compiler: str) -> Path:
    """Where the kernel built by `compiler` lives (or will)."""
    jaxlib = importlib.metadata.version("jaxlib")
    return native_path("cpu_attention", SOURCE, compiler, _FLAGS, extra=(jaxlib,))


def _build(compiler: str, target: Path) -> None:
    args = [*_FLAGS, f"-I{jax.ffi.include_dir()}"]
    if platform.system() == "Darwin":
        args = ["-undefined", "dynamic_lookup", *args]
    build_native(compiler, args, SOURCE, target)


def _ensure_registered() -> bool:
    with _lock:
        if "ok" in _state:
            return bool(_state["ok"])
        try:
            found = compiler()
            if found is None:
                raise RuntimeError("no C++ compiler found (tried $CXX, c++, g++, clang++)")
            path = library_path(found)

            def build(target: Path) -> None:
                log.info("building the CPU decode-attention kernel into %s", target)
                _build(found, target)

            lib = load_native(path, build, lambda p: ctypes.cdll.LoadLibrary(str(p)))
            jax.ffi.register_ffi_target(
                TARGET, jax.ffi.pycapsule(lib.JaxevalDecodeAttention), platform="cpu"
            )
            jax.ffi.register_ffi_target(
                PACKED_TARGET, jax.ffi.pycapsule(lib.JaxevalPackedAttention), platform="cpu"
            )
            _state["ok"] = True
        except Exception as err:  # noqa: BLE001 - any failure falls back to XLA's loop
            log.info("CPU decode-attention kernel unavailable, using XLA's loop: %s", err)
            _state.update(ok=False, error=str(err))
        return bool(_state["ok"])


def require() -> None:
    """The kernels registered before a program names them (built on first use)."""
    if not _ensure_registered():
        raise JaxevalError(
            f"the CPU attention kernels could not be built: {_state['error']}",
            hint="install a C++ compiler (or set CXX), or use attention=xla",
        )


def cpu_decode_state(q, cache, layer, bound, q_pos, window, scale, softcap):
    """The kernel's online-softmax state (see the module docstring); float32 operands. `cache`:
    the KV cache (the model contract's `KVCache`: k [L, B, G, E, C], v [L, B, G, C, E], the
    slots' valid flags and positions [B, C])."""
    require()
    k, v, valid, slot_pos = cache.k, cache.v, cache.valid, cache.positions
    b, g, m, e = q.shape
    out = (
        jax.ShapeDtypeStruct((b, g, m), jnp.float32),
        jax.ShapeDtypeStruct((b, g, m), jnp.float32),
        jax.ShapeDtypeStruct((b, g, m, e), jnp.float32),
    )
    windowed = window is not None
    call = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")
    return call(
        q, k, v,
        jnp.asarray(layer, jnp.int32), jnp.asarray(bound, jnp.int32), valid.astype(bool),
        slot_pos.astype(jnp.int32), jnp.asarray(q_pos, jnp.int32),
        jnp.asarray(window if windowed else 0, jnp.int32), jnp.asarray(scale, jnp.float32),
        softcap=np.float32(softcap or 0.0), windowed=np.int32(windowed),
    )  # fmt: skip


def cpu_packed(q, k, v, mask: Mask, *, scale, softcap, init: State):
    """`blocked_attend`'s output (finished, [B, T, H, E] float32) in one fused pass: each (row, kv
    head, 16 queries) walks the keys up to its last query in blocks of 128 with an online softmax
    that starts from `init` ([B, G, X, T] max and sum, [B, G, X, T, E] values)."""
    require()
    b, t, h, e = q.shape
    g = k.shape[2]
    segment, parent, positions, window = mask
    windowed = window is not None
    call = jax.ffi.ffi_call(
        PACKED_TARGET, jax.ShapeDtypeStruct((b, t, h, e), jnp.float32), vmap_method="sequential"
    )
    m0, total0, acc0 = init
    return call(
        q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3),  # keys [B, G, E, T], values [B, G, T, E]
        segment.astype(jnp.int32), parent.astype(jnp.int32), positions.astype(jnp.int32),
        m0.reshape(b, g, h // g, t), total0.reshape(b, g, h // g, t),
        acc0.reshape(b, g, h // g, t, e),
        jnp.asarray(window if windowed else 0, jnp.int32), jnp.asarray(scale, jnp.float32),
        softcap=np.float32(softcap or 0.0), windowed=np.int32(windowed),
    )  # fmt: skip
