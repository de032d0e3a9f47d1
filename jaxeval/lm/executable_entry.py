"""One entry of the executable store as bytes: metadata in JSON and the serialized executable,
signed together with an HMAC-SHA256 under a key of this user's. Nothing in an entry is parsed,
let alone deserialized, before its HMAC verifies.

    offset   bytes
    0        b"jaxeval-exe\\x00"                                   MAGIC, 12
    12       00 00 00 00 00 00 00 6c                               the metadata's length, 108
    20       {"devices":[0],"fingerprint":"9f3c","format":2,       the metadata (`EntryMeta`),
              "out_tree":{"tuple":["*","*"]},"platform":"cpu",     UTF-8 JSON, 108
              "targets":[]}
    128      the executable as `jax.experimental.serialize_executable.serialize` writes it
             (b"PAYLOAD" here, 7)
    135      HMAC-SHA256(key, bytes 0 .. 135)                      32; 167 in all

(the fingerprint cut to 4 of its 64 hex digits).

The trees an executable takes and returns are never stored as pickles: the input tree is rebuilt
from the job's own arguments (`in_tree_of`), the output tree is described in JSON (`tree_json`)
by node kind, with named tuples by their module and name, resolved only among jaxeval's and
JAX's modules already imported (`tree_of_json`):

    (ScoreResult(a, b), [c, None], {"k": d})
    ->  {"tuple": [
            {"namedtuple": "jaxeval.kernels.score:ScoreResult",
             "fields": ["loglik", "is_greedy"], "items": ["*", "*"]},
            {"list": ["*", null]},
            {"dict": [["k", "*"]]}]}

The executable itself is JAX's pickle (`serialize_executable`); once the HMAC holds, it is read by
`PayloadUnpickler`, which names only JAX's classes, its `_unpickle_*` functions and NumPy's arrays
(`loadable`), and calls only what it named: a planted `exec`, `os.system` or `numpy.load` is
refused, and so is a call of an object the pickle built.

The key (`user_key`): 32 bytes from `secrets`, made once in `<cache home>/keys/executables.key`,
a 0600 file in a 0700 folder (`jaxeval.paths.private_dir`). A key file that is not a regular file
of this user's, or that group or others may read or write, is never used: the store is off for the
run, with one warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import logging
import os
import pickle
import secrets
import stat
import sys
import types
from pathlib import Path
from typing import Any

import jax
from jax.experimental import serialize_executable

from jaxeval import paths

log = logging.getLogger(__name__)

MAGIC = b"jaxeval-exe\x00"
FORMAT = 2  # bumped when an entry's layout changes
KEY_BYTES = 32
TAG_BYTES = hashlib.sha256().digest_size
KEY_NAME = "executables.key"
_LENGTH_BYTES = 8
_MAX_META_BYTES = 1 << 20
_warned: set[str] = set()


def warn_once(what: str, detail: str) -> None:
    """One warning per kind of refusal (`what`) in a process; the run goes on without the entry."""
    if what not in _warned:
        _warned.add(what)
        log.warning("executable store: %s (%s); compiled instead", what, detail)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EntryMeta:
    """What an entry says of its executable, besides the executable itself."""

    fingerprint: str  # `ExecutableStore.fingerprint` of the job
    platform: str  # of its devices: "cpu", "tpu", "gpu"
    devices: tuple[int, ...]  # their ids, in the executable's order
    targets: tuple[str, ...]  # custom calls it names, registered before it loads
    out_tree: Any  # `tree_json` of its output tree

    def to_json(self) -> bytes:
        body = dataclasses.asdict(self) | {"format": FORMAT}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, obj: Any) -> EntryMeta:
        """The metadata in `obj`; ValueError for JSON of any other shape."""
        names = {f.name for f in dataclasses.fields(cls)} | {"format"}
        if not isinstance(obj, dict) or set(obj) != names or obj["format"] != FORMAT:
            raise ValueError("metadata of another shape")
        strings = [obj["fingerprint"], obj["platform"], *_listed(obj["targets"])]
        devices = _listed(obj["devices"])
        if not all(isinstance(s, str) for s in strings) or not devices:
            raise ValueError("metadata of another shape")
        if not all(type(d) is int for d in devices):
            raise ValueError("metadata of another shape")
        return cls(
            fingerprint=obj["fingerprint"],
            platform=obj["platform"],
            devices=tuple(devices),
            targets=tuple(obj["targets"]),
            out_tree=obj["out_tree"],
        )


def _listed(x: Any) -> list:
    if not isinstance(x, list):
        raise ValueError("metadata of another shape")
    return x


def pack(meta: EntryMeta, payload: bytes, key: bytes) -> bytes:
    """The entry's bytes (module docstring)."""
    head = meta.to_json()
    body = MAGIC + len(head).to_bytes(_LENGTH_BYTES, "big") + head + payload
    return body + hmac.new(key, body, hashlib.sha256).digest()


def unpack(data: bytes, key: bytes) -> tuple[EntryMeta, bytes]:
    """(metadata, payload) of an entry whose HMAC verifies under `key`; ValueError otherwise
    (checked before a byte of it is parsed)."""
    start = len(MAGIC) + _LENGTH_BYTES
    if len(data) < start + TAG_BYTES or not data.startswith(MAGIC):
        raise ValueError("not an entry")
    body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(tag, hmac.new(key, body, hashlib.sha256).digest()):
        raise ValueError("wrong HMAC")
    length = int.from_bytes(body[len(MAGIC) : start], "big")
    if length > min(_MAX_META_BYTES, len(body) - start):
        raise ValueError("metadata of another shape")
    meta = EntryMeta.from_json(json.loads(body[start : start + length].decode()))
    return meta, body[start + length :]


def in_tree_of(args: tuple) -> Any:
    """The input tree of an executable compiled for `args`: JAX's `((args...), {})`."""
    return jax.tree.structure((tuple(args), {}))


_LEAF = object()  # a placeholder leaf


def tree_json(tree: Any) -> Any:
    """`tree` (a PyTreeDef) as JSON (module docstring); ValueError for a node it cannot name."""
    return _node_json(tree.unflatten([_LEAF] * tree.num_leaves))


def _node_json(x: Any) -> Any:
    if x is _LEAF:
        return "*"
    if x is None:
        return None
    if type(x) is tuple or type(x) is list:
        return {type(x).__name__: [_node_json(v) for v in x]}
    if type(x) is dict and all(type(k) is str for k in x):
        return {"dict": [[k, _node_json(v)] for k, v in x.items()]}
    cls = type(x)
    if isinstance(x, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
        return {
            "namedtuple": f"{cls.__module__}:{cls.__qualname__}",
            "fields": list(cls._fields),
            "items": [_node_json(v) for v in x],
        }
    raise ValueError(f"a pytree node of type {cls.__qualname__}")


def tree_of_json(obj: Any) -> Any:
    """The PyTreeDef `tree_json` described; ValueError for anything else."""
    return jax.tree.structure(_node_of_json(obj))


def _node_of_json(obj: Any) -> Any:
    if obj == "*":
        return 0
    if obj is None:
        return None
    if isinstance(obj, dict) and len(obj) == 1 and set(obj) <= {"tuple", "list", "dict"}:
        (kind, items), = obj.items()  # fmt: skip
        if kind == "dict":
            pairs = _listed(items)
            if not all(isinstance(p, list) and len(p) == 2 and type(p[0]) is str for p in pairs):
                raise ValueError("a tree of another shape")
            return {k: _node_of_json(v) for k, v in pairs}
        children = [_node_of_json(v) for v in _listed(items)]
        return tuple(children) if kind == "tuple" else children
    if isinstance(obj, dict) and set(obj) == {"namedtuple", "fields", "items"}:
        cls = _named_tuple(obj["namedtuple"], obj["fields"])
        return cls(*(_node_of_json(v) for v in _listed(obj["items"])))
    raise ValueError("a tree of another shape")


def _named_tuple(name: Any, fields: Any) -> type:
    """The named tuple class `module:qualname` of jaxeval or JAX, from a module already imported."""
    module_name, _, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
    root = module_name.split(".")[0]
    module = sys.modules.get(module_name) if root in ("jaxeval", "jax") else None
    cls: Any = module
    for part in qualname.split(".") if module is not None else ():
        cls = getattr(cls, part, None) if part.isidentifier() else None
    ok = isinstance(cls, type) and issubclass(cls, tuple) and cls.__module__ == module_name
    if not ok or list(getattr(cls, "_fields", ())) != fields:
        raise ValueError(f"no named tuple {name!r}")
    return cls


# What a serialized executable may name besides JAX's own classes (NumPy's arrays and dtypes).
_NUMPY_NAMES = frozenset(
    {("numpy", "dtype"), ("numpy", "ndarray")}
    | {(m, n) for m in ("numpy._core.multiarray", "numpy.core.multiarray")
       for n in ("_reconstruct", "scalar")}
)  # fmt: skip
_JAX_ROOTS = ("jax", "jaxlib", "ml_dtypes")


def loadable(module: str, name: str) -> Any:
    """The global a serialized executable names, if it is one an executable is made of: a class
    of JAX's (`jax`, `jaxlib`, `ml_dtypes`), one of JAX's `_unpickle_*` functions, or NumPy's
    array, scalar and dtype; from a module already imported. Raises `pickle.UnpicklingError`
    otherwise.

        ("jax._src.mesh", "Mesh"), ("jax._src.named_sharding", "_unpickle_named_sharding")  -> it
        ("builtins", "exec"), ("os", "system"), ("numpy", "load"), ("jax.numpy", "load")  -> refused
    """
    obj = getattr(sys.modules.get(module), name, None) if name.isidentifier() else None
    owner = getattr(obj, "__module__", None) or ""
    ours = module.split(".")[0] in _JAX_ROOTS and owner.split(".")[0] in _JAX_ROOTS
    if (module, name) in _NUMPY_NAMES and obj is not None:
        return obj
    if ours and isinstance(obj, type):
        return obj
    if ours and name.startswith("_unpickle") and isinstance(obj, types.FunctionType):
        return obj
    raise pickle.UnpicklingError(f"{module}.{name} is not part of an executable")


_JAX_UNPICKLER = serialize_executable._JaxPjrtUnpickler


class PayloadUnpickler(pickle._Unpickler):
    """JAX's unpickler of executables (its devices, client and XLA executable by persistent id),
    run in Python so that a pickle calls nothing but what `find_class` handed out (`loadable`):
    an instance it built (a `Mesh`, a `Partial`) is never called."""

    def __init__(self, file: Any, backend: Any, execution_devices: Any = None):
        super().__init__(file)
        self._jax = _JAX_UNPICKLER(io.BytesIO(), backend, execution_devices)
        self._named: set[int] = set()

    def persistent_load(self, pid: Any) -> Any:
        return self._jax.persistent_load(pid)

    def find_class(self, module: str, name: str) -> Any:
        obj = loadable(module, name)
        self._named.add(id(obj))
        return obj

    def _callable_at(self, depth: int) -> None:
        if id(self.stack[depth]) not in self._named:
            raise pickle.UnpicklingError("a call of something no global named")

    def load_reduce(self) -> None:  # stack: ..., callable, args
        self._callable_at(-2)
        super().load_reduce()

    def load_newobj(self) -> None:  # stack: ..., cls, args
        self._callable_at(-2)
        super().load_newobj()

    def load_newobj_ex(self) -> None:  # stack: ..., cls, args, kwargs
        self._callable_at(-3)
        super().load_newobj_ex()

    def load_obj(self) -> None:  # protocol 0-1: refused
        raise pickle.UnpicklingError("OBJ")

    dispatch = dict(pickle._Unpickler.dispatch)
    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.OBJ[0]] = load_obj


def user_key(folder: Path | None = None) -> bytes | None:
    """This user's key (module docstring), made on first use; None, with one warning, when it
    cannot be made or must not be used."""
    folder = paths.cache_dir("keys") if folder is None else Path(folder)
    if paths.private_dir(folder) is None:  # it warned
        return None
    path = folder / KEY_NAME
    try:
        if not os.path.lexists(path):
            _make_key(path)
        st = os.lstat(path)
    except OSError as e:
        warn_once("no key could be made", f"{path}: {e.strerror or e}")
        return None
    why = paths.untrusted_reason(st, folder=False)
    if why is None and st.st_mode & 0o077:
        why = "readable by group or others"
    if why is None and st.st_size != KEY_BYTES:
        why = f"{st.st_size} bytes, not {KEY_BYTES}"
    key = None if why else paths.read_private(path, KEY_BYTES)
    if key is None or len(key) != KEY_BYTES:
        warn_once("the key is not used", f"{path}: {why or 'unreadable'}; remove it for a new one")
        return None
    return key


def _make_key(path: Path) -> None:
    """32 bytes from `secrets` at `path`, mode 0600 whatever the umask: written to a temporary
    file and linked into place, so a process that races this one keeps the first key."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, stat.S_IRUSR | stat.S_IWUSR)
    try:
        try:
            os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: that key is the key
    finally:
        os.unlink(tmp)
