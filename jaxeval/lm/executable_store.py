"""Compiled executables kept on disk under a fingerprint of everything that decides them, so a
later run loads each one without tracing or lowering it.

    store = ExecutableStore.for_compile_cache()      # None when the compilation cache is off
    digest = store.fingerprint(job, options)         # None: something it cannot vouch for
    exe = store.load(digest, job.args)               # a `jax.stages.Compiled`, or None
    store.save(digest, job.args, compiled, lowered)  # after a compile

JAX's persistent compilation cache (`compile_cache`) skips XLA's compile, but it is keyed by the
lowered program, so every run still traces and lowers each kernel first: a warm GSM8K run spent
3.3 s of its CPU there (13 executables, ~0.15-0.6 s each) against 0.7 s loading them. This store
keys an executable by what the lowered program is a function of instead, and refuses to key
anything it cannot describe exactly:

- jaxeval's own code: a hash of every source file of the package (`.py`, and the `.cc` of the CPU
  kernels), read once per process; the versions of Python, jax, jaxlib, NumPy and each device's
  platform (libtpu's or CUDA's among them); the environment variables that steer jaxeval, JAX,
  XLA or libtpu; JAX's configuration values;
- the job: its key, the shapes, dtypes, weak types and shardings (mesh axes, device ids and kinds,
  partition specs) of its arguments and their tree, the in/out shardings, donated arguments and
  compiler options;
- the function: its module, qualified name and bytecode, its defaults and the values its closure holds,
  described recursively (plain values, containers, NumPy arrays by content, dataclasses and
  jaxeval objects by their fields, functions by the same rule, meshes and shardings by their
  devices). A function outside jaxeval (a model handed over in memory, a test's lambda) or a value
  of any other kind makes the fingerprint None: that job compiles as before, through JAX's cache.

What XLA compiles in this process is stored; so is a program JAX's persistent cache already
held (an edit of jaxeval that left the program as it was: the fingerprint changed, the lowered
program did not), from the serialized bytes that cache read (`cache_reads`), not by serializing
the loaded executable again: XLA:CPU serializes an executable it loaded without its code (running
such a copy fails with "Function ... not found"). Both hooks are JAX internals looked up at run
time; where one is missing, nothing is stored from JAX's cache. The custom calls an executable
names (the CPU attention kernels) are registered before it loads.
`JAXEVAL_EXECUTABLE_STORE=off` switches the store off; it lives in
`<compilation cache>/jaxeval-executables`, so `--compilation_cache off` switches it off too.

An entry is data, never code (`jaxeval.lm.executable_entry`): JSON metadata and the serialized
executable, signed with an HMAC under a key of this user's, written once into a 0700 folder as a
0600 file (a temporary file renamed, `jaxeval.paths.write_private`). It is read back only when
it is a regular file of this user's that group and others cannot write, opened without blocking
and no larger than `MAX_ENTRY_BYTES` (`jaxeval.paths.read_private`); then its HMAC is checked,
then its metadata and fingerprint; only then is the executable loaded, by an unpickler that names
nothing outside JAX's own classes and calls nothing it did not name
(`executable_entry.PayloadUnpickler`). The trees it takes and returns are never unpickled: the
input tree is rebuilt from the job's arguments, the output tree from its JSON description.
Anything else (another user's entry, a FIFO, a folder, a wrong HMAC, a read-only or missing
store, an entry that fails to load) is "not cached", with one warning: the job compiles as before
and the run's answers are the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import os
import pathlib
import platform
import re
import sys
import threading
import types
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

from jaxeval import paths
from jaxeval.lm import executable_entry as entry
from jaxeval.models.attention import cpu as cpu_attention
from jaxeval.platform import compile_cache

ENV_VAR = "JAXEVAL_EXECUTABLE_STORE"
SUBDIR = "jaxeval-executables"
FORMAT = entry.FORMAT  # bumped when an entry's layout changes
MAX_ENTRY_BYTES = 1 << 30  # an entry larger than this is neither written nor read
_ENV_PREFIXES = ("JAXEVAL_", "JAX_", "XLA_", "LIBTPU", "TPU_", "TF_CPP_", "NVIDIA_", "CUDA_")
_ENV_SKIP = frozenset({ENV_VAR, "JAXEVAL_CACHE", "JAXEVAL_COMPILATION_CACHE"})  # where, not what
_MAX_ARRAY_BYTES = 1 << 20  # closed-over arrays hashed by content up to this size
_PACKAGE = pathlib.Path(__file__).resolve().parents[1]  # jaxeval/


class Undescribed(Exception):
    """A value the fingerprint cannot vouch for: the job is not stored."""


def _own(module: str | None) -> bool:
    return module is not None and (module == "jaxeval" or module.startswith("jaxeval."))


# Modules whose functions and types are named, not described: their code is fixed by the versions
# in the fingerprint.
_LIBRARIES = ("jax", "jaxlib", "numpy", "builtins", "operator", "math", "functools", "ml_dtypes")


def _library(module: str | None) -> bool:
    root = (module or "").split(".")[0]
    return root in _LIBRARIES or root in sys.builtin_module_names  # `_operator`, `_functools`


@functools.cache
def source_digest() -> str:
    """sha256 over jaxeval's source files (relative path and content), in path order."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".cc", ".h") or "__pycache__" in path.parts:
            continue
        h.update(str(path.relative_to(_PACKAGE)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _environment() -> str:
    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) and k not in _ENV_SKIP
    )
    config = sorted((k, repr(v)) for k, v in jax.config.values.items())
    versions = (platform.python_version(), sys.platform, jax.__version__, jaxlib.__version__)
    versions += (np.__version__,)
    where = (jax.process_index(), jax.process_count())  # each process keeps its own entries
    return repr((FORMAT, versions, where, env, config, source_digest()))


def _device(d: Any) -> str:
    client = getattr(d, "client", None)
    version = getattr(client, "platform_version", "") if client is not None else ""
    return f"{d.platform}:{d.device_kind}:{d.id}:{d.process_index}:{version}"


def _mesh(m: Any) -> str:
    devices = getattr(m, "devices", None)
    if devices is None:  # an AbstractMesh: no devices to compile for
        raise Undescribed("abstract mesh")
    ids = [_device(d) for d in np.asarray(devices).reshape(-1)]
    axis_types = getattr(m, "axis_types", None)
    return f"Mesh({m.axis_names!r},{np.shape(devices)},{ids},{axis_types!r})"


def _sharding(s: Any) -> str:
    if isinstance(s, jax.sharding.NamedSharding):
        return f"Named({_mesh(s.mesh)},{s.spec!r},{s.memory_kind!r})"
    if isinstance(s, jax.sharding.SingleDeviceSharding):
        return f"Single({_device(next(iter(s.device_set)))},{s.memory_kind!r})"
    raise Undescribed(f"sharding {type(s).__name__}")


def describe(x: Any, _seen: set[int] | None = None) -> str:
    """A string that two values give alike only when a program traced over them is the same
    (module docstring); raises `Undescribed` for anything else."""
    seen = set() if _seen is None else _seen
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return f"{type(x).__name__}:{x!r}"
    if isinstance(x, enum.Enum):
        return f"enum:{type(x).__module__}.{type(x).__qualname__}.{x.name}"
    if isinstance(x, (np.dtype, np.generic)) or (isinstance(x, type) and issubclass(x, np.generic)):
        return f"np:{np.dtype(x) if isinstance(x, type) else x.dtype}:{x!r}"
    if isinstance(x, type):
        if not (_own(x.__module__) or _library(x.__module__)):
            raise Undescribed(f"type {x.__module__}.{x.__qualname__}")
        return f"type:{x.__module__}.{x.__qualname__}"
    if isinstance(x, types.ModuleType):
        return f"module:{x.__name__}"
    if id(x) in seen:  # a value met again on its own path (a recursive closure)
        return "<seen>"
    seen = seen | {id(x)}
    if isinstance(x, jax.ShapeDtypeStruct):
        sharding = _sharding(x.sharding) if x.sharding is not None else "None"
        return f"SDS({x.shape},{x.dtype},{x.weak_type},{sharding})"
    if isinstance(x, jax.sharding.Sharding):
        return _sharding(x)
    if isinstance(x, jax.sharding.Mesh):
        return _mesh(x)
    if isinstance(x, jax.sharding.PartitionSpec):
        return repr(x)
    if isinstance(x, np.ndarray):
        if x.nbytes > _MAX_ARRAY_BYTES or x.dtype == object:
            raise Undescribed("large or object array")
        digest = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()
        return f"nd({x.shape},{x.dtype},{digest})"
    if isinstance(x, jax.Array):
        if x.nbytes > _MAX_ARRAY_BYTES or not x.is_fully_addressable:
            raise Undescribed("large or distributed array")
        return "jax" + describe(np.asarray(x), seen) + _sharding(x.sharding)
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a NamedTuple
        head = describe(type(x), seen)
        return f"{head}({','.join(describe(v, seen) for v in x)})"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__}[{','.join(describe(v, seen) for v in x)}]"
    if isinstance(x, dict):
        items = sorted((describe(k, seen), describe(v, seen)) for k, v in x.items())
        return f"dict{{{','.join(f'{k}:{v}' for k, v in items)}}}"
    if isinstance(x, (set, frozenset)):
        return f"{type(x).__name__}{{{','.join(sorted(describe(v, seen) for v in x))}}}"
    if isinstance(x, functools.partial):
        kw = describe(dict(x.keywords), seen)
        return f"partial({describe(x.func, seen)},{describe(x.args, seen)},{kw})"
    if isinstance(x, types.MethodType):
        return f"method({describe(x.__func__, seen)},{describe(x.__self__, seen)})"
    if isinstance(x, types.FunctionType):
        return _function(x, seen)
    if isinstance(x, (types.BuiltinFunctionType, np.ufunc)) or (
        callable(x) and _library(getattr(x, "__module__", None)) and hasattr(x, "__qualname__")
    ):
        module = getattr(x, "__module__", None) or ""
        if not _library(module) and not isinstance(x, np.ufunc):
            raise Undescribed(f"builtin {module}")
        return f"fn:{module}.{getattr(x, '__qualname__', getattr(x, '__name__', '?'))}"
    cls = type(x)
    if not _own(cls.__module__):
        raise Undescribed(f"{cls.__module__}.{cls.__qualname__}")
    if dataclasses.is_dataclass(x):
        fields = [(f.name, getattr(x, f.name)) for f in dataclasses.fields(x)]
    elif hasattr(x, "__dict__"):
        fields = sorted(vars(x).items())
    else:
        slots = [s for c in cls.__mro__ for s in getattr(c, "__slots__", ())]
        fields = [(s, getattr(x, s)) for s in slots if hasattr(x, s)]
    body = ",".join(f"{k}={describe(v, seen)}" for k, v in fields)
    return f"{cls.__module__}.{cls.__qualname__}({body})"


def _function(fn: types.FunctionType, seen: set[int]) -> str:
    module = fn.__module__
    if _library(module):
        return f"fn:{module}.{fn.__qualname__}"
    if not _own(module):
        raise Undescribed(f"function {module}.{fn.__qualname__}")
    cells = [_cell(c) for c in fn.__closure__ or ()]
    parts = (
        fn.__qualname__,
        _code(fn.__code__),
        describe(fn.__defaults__, seen),
        describe(fn.__kwdefaults__, seen),
        describe(tuple(cells), seen),
    )
    return f"fn:{module}.{parts}"


def _cell(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not bound yet
        return "<empty cell>"


def _code(co: types.CodeType) -> str:
    """A code object by its bytecode and constants (two lambdas of one line differ by them)."""
    consts = [_code(c) if isinstance(c, types.CodeType) else repr(c) for c in co.co_consts]
    digest = hashlib.sha256(co.co_code + repr((co.co_names, consts)).encode()).hexdigest()
    return f"{co.co_firstlineno}:{digest[:16]}"


_CUSTOM_CALL = re.compile(r"custom_call\s*@(\w+)|call_target_name\s*=\s*\"(\w+)\"")


def _targets(text: str) -> list[str]:
    """The custom-call targets a lowered program names."""
    return sorted({a or b for a, b in _CUSTOM_CALL.findall(text)})


_reads = threading.local()
_pickler_lock = threading.Lock()  # `_serialize` swaps the pickler JAX's `serialize` uses


@functools.cache
def _watch_cache_reads() -> bool:
    """Hands the serialized executables JAX's persistent cache reads on a thread inside
    `cache_reads` to it (JAX's reader splits each entry into executable and compile time with
    `extract_executable_and_time`); False where this JAX has no such step."""
    try:  # JAX's private module: its reader is wrapped only where it has this shape
        from jax._src import compilation_cache
    except ImportError:
        return False
    extract = getattr(compilation_cache, "extract_executable_and_time", None)
    if extract is None:
        return False

    def extract_executable_and_time(*args: Any, **kwargs: Any) -> Any:
        out = extract(*args, **kwargs)
        read = getattr(_reads, "read", None)
        if read is not None and isinstance(out, tuple) and isinstance(out[0], bytes):
            read.append(out[0])
        return out

    compilation_cache.extract_executable_and_time = extract_executable_and_time
    return True


@contextlib.contextmanager
def cache_reads():
    """The serialized executables JAX's persistent cache hands over on this thread meanwhile
    (a list, filled as they are read)."""
    read: list[bytes] = []
    if not _watch_cache_reads():
        yield read
        return
    outer = getattr(_reads, "read", None)
    _reads.read = read
    try:
        yield read
    finally:
        _reads.read = outer


def _serialize(compiled: Any, serialized: bytes | None) -> tuple[bytes, Any, Any]:
    """`serialize_executable.serialize(compiled)`, its one XLA executable written as `serialized`
    (the bytes JAX's cache loaded it from) when given, instead of serialized again."""
    if serialized is None:
        with _pickler_lock:
            return serialize_executable.serialize(compiled)
    base = serialize_executable._JaxPjrtPickler
    kinds = (serialize_executable.xc.LoadedExecutable, serialize_executable._jax.Executable)
    seen: set[int] = set()

    class Pickler(base):  # type: ignore[misc,valid-type]
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, kinds):
                seen.add(id(obj))
                return ("exec", serialized)
            return super().persistent_id(obj)

    with _pickler_lock:
        serialize_executable._JaxPjrtPickler = Pickler
        try:
            out = serialize_executable.serialize(compiled)
        finally:
            serialize_executable._JaxPjrtPickler = base
    if len(seen) != 1:  # the bytes stand for one executable: any other layout is not stored
        raise ValueError(f"{len(seen)} executables in one compiled program")
    return out


def _deserialize(payload: bytes, in_tree: Any, out_tree: Any, devices: list) -> Any:
    """`serialize_executable.deserialize_and_load`, its pickle read by `PayloadUnpickler`."""
    base = serialize_executable._JaxPjrtUnpickler
    with _pickler_lock:
        serialize_executable._JaxPjrtUnpickler = entry.PayloadUnpickler
        try:
            return serialize_executable.deserialize_and_load(
                payload, in_tree, out_tree, backend=devices[0].client, execution_devices=devices
            )
        finally:
            serialize_executable._JaxPjrtUnpickler = base


class ExecutableStore:
    """Serialized executables under one directory (module docstring)."""

    def __init__(self, root: str | os.PathLike, key: bytes):
        self.root = pathlib.Path(root)
        self.key = key  # signs and checks every entry (`executable_entry.user_key`)

    @classmethod
    def for_compile_cache(cls) -> ExecutableStore | None:
        """The store beside JAX's persistent cache; None when either is switched off, or when
        this user's key cannot be had (one warning)."""
        if os.environ.get(ENV_VAR, "on").strip().lower() in compile_cache.OFF:
            return None
        base = jax.config.jax_compilation_cache_dir
        key = entry.user_key() if base else None
        return cls(os.path.join(base, SUBDIR), key) if key is not None else None

    def fingerprint(self, job: Any, options: dict | None) -> str | None:
        """sha256 of the job as the module docstring lists it; None when it cannot be vouched for."""
        try:
            leaves, tree = jax.tree.flatten(job.args)
            parts = (
                _environment(),
                describe(job.key),
                str(tree),
                [_leaf(x) for x in leaves],
                _shardings(job.in_shardings),
                _shardings(job.out_shardings),
                describe(tuple(job.donate_argnums)),
                describe(dict(options or {})),
                describe(job.fn),
            )
        except Undescribed:
            return None
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def _path(self, digest: str) -> pathlib.Path:
        return self.root / f"{digest}.exe"

    def load(self, digest: str, args: tuple) -> Any:
        """The executable stored under `digest` for a job on `args`, loaded onto its devices;
        None if absent or unusable (module docstring)."""
        path = self._path(digest)
        if not os.path.isdir(self.root):  # no store yet (or a file in its place: `save` warns)
            return None
        data = paths.read_private(path, MAX_ENTRY_BYTES)  # None: absent, or skipped with a warning
        if data is None:
            return None
        try:
            meta, payload = entry.unpack(data, self.key)
            if meta.fingerprint != digest:
                raise ValueError("another fingerprint")
            out_tree = entry.tree_of_json(meta.out_tree)
        except Exception as e:  # tampered, foreign or of another format
            entry.warn_once("an entry failed its check", f"{path}: {e}")
            _remove(path)  # this user's own file (`read_private`): compiled over
            return None
        try:
            cpu_attention.register_custom_calls(list(meta.targets))
            by_id = {d.id: d for d in jax.devices(meta.platform)}
            devices = [by_id[i] for i in meta.devices]
            return _deserialize(payload, entry.in_tree_of(args), out_tree, devices)
        except Exception as e:  # another machine's devices, a JAX that reads it no more
            entry.warn_once("an entry failed to load", f"{path}: {type(e).__name__}: {e}")
            _remove(path)
            return None

    def save(
        self,
        digest: str,
        args: tuple,
        compiled: Any,
        lowered: Any,
        serialized: bytes | None = None,
    ) -> bool:
        """Writes `compiled`, compiled for a job on `args`, under `digest` (atomically); False
        when it cannot be serialized, its trees cannot be rebuilt, or the write fails (one
        warning). `serialized`: the bytes JAX's persistent cache loaded it from (`cache_reads`)."""
        try:
            payload, in_tree, out_tree = _serialize(compiled, serialized)
            devices = compiled._executable._unloaded_executable.device_list  # its devices, in order
            meta = entry.EntryMeta(
                fingerprint=digest,
                platform=devices[0].platform,
                devices=tuple(d.id for d in devices),
                targets=tuple(_targets(lowered.as_text())),
                out_tree=entry.tree_json(out_tree),
            )
            rebuilt = entry.tree_of_json(meta.out_tree) == out_tree
            if not rebuilt or in_tree != entry.in_tree_of(args):
                return False
            data = entry.pack(meta, payload, self.key)
        except Exception:  # not serializable (constants, a backend without it): nothing stored
            return False
        if len(data) > MAX_ENTRY_BYTES:
            return False
        if not paths.write_private(self._path(digest), data):  # a read-only or full disk
            entry.warn_once("an entry could not be written", str(self.root))
            return False
        return True


def _remove(path: pathlib.Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or a read-only store: it stays unused
        path.unlink()


def _leaf(x: Any) -> str:
    """An argument as the compiler sees it: shape, dtype, weak type and sharding."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return describe(x)
    if isinstance(x, (bool, int, float, complex)):  # a Python scalar: weakly typed, value unread
        return f"py({type(x).__name__})"
    shape, dtype = np.shape(x), getattr(x, "dtype", None)
    if dtype is None:
        raise Undescribed(f"argument {type(x).__name__}")
    sharding = getattr(x, "sharding", None)
    where = _sharding(sharding) if sharding is not None else "host"
    return f"arg({shape},{np.dtype(dtype)},{getattr(x, 'weak_type', False)},{where})"


def _shardings(tree: Any) -> str:
    if tree is None:
        return "None"
    leaves, structure = jax.tree.flatten(tree)
    return f"{structure}[{','.join(_sharding(s) for s in leaves)}]"
