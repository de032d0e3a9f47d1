"""Start-up of the `jaxeval` command: keep transformers from importing torch it will not use.

transformers imports torch whenever torch is installed, to build a config or a tokenizer it never
runs through torch: `AutoTokenizer` pulls in `torch` and `torch.distributed`, which takes longer
than the config and tokenizer themselves (docs/performance.md, "Start-up and compilation"). jaxeval
needs neither, and lm-eval users usually have torch installed, so the command
line (a process of its own) tells transformers torch is absent before anything imports it:

    jaxeval run ...                                  transformers sees no torch (a faster start)
    JAXEVAL_TRANSFORMERS_TORCH=1 jaxeval run ...     transformers sees torch (a task helper that runs
                                                     a transformers model on torch needs this)

Only transformers' view changes: `import torch` still works for anything that imports it itself.
A library user (`jaxeval.simple_evaluate` in a notebook, a test process that also runs lm-eval)
is never affected: `hide_torch_from_transformers` is called by the command's entry point only,
does nothing once transformers is imported, and hides nothing once torch is.

transformers also reads its whole `models` folder at import (1,100+ source files scanned for their
`__all__` lists and backends, twice: `transformers/__init__.py` and `transformers.models`), ~0.8 s
of every process on a 2-core EPYC. The command keeps what that scan returns, per folder, under
`<cache_home>/startup/` (`JAXEVAL_STARTUP_CACHE=DIR` elsewhere, `off` for none), keyed by the
transformers version, the folder and every source file's size and modification time, so that a
later process reads it back instead (an edited, added or removed file, or another transformers,
scans again). Anything unexpected (an unreadable or damaged entry, a read-only cache) falls back to
transformers' own scan.

An entry is read back only when it is exactly what this module wrote: a file of this user's in a
private folder (`jaxeval.paths.read_private`: 0700 folder, 0600 file, opened with O_NONBLOCK so a
FIFO never blocks, refused above `MAX_ENTRY_BYTES` without being read), holding a structure of the
right types whose sha256 (with its key) matches the one stored beside it:

    {"format": 2, "digest": sha256(key + rows), "structure": rows}
    rows = [[["torch"], {"modeling_llama": ["LlamaModel", ...]}], [[], {...}], ...]

Anything else (`[]`, rows of other types, a digest that does not match) is scanned again with one
warning and kept, so a damaged entry never reaches transformers (where `[]` would be
`ImportError: AutoConfig`, and a structure without its `frozenset()` key `KeyError: frozenset()`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

from jaxeval.paths import OFF, cache_home, read_private, write_private

log = logging.getLogger(__name__)

KEEP_TORCH = "JAXEVAL_TRANSFORMERS_TORCH"
STARTUP_CACHE = "JAXEVAL_STARTUP_CACHE"
ENTRY_FORMAT = 2
MAX_ENTRY_BYTES = 16 << 20  # the largest entry transformers 5 writes is ~180 KB


def hide_torch_from_transformers() -> bool:
    """Makes transformers' `is_torch_available()` false for this process; True if it will. Also
    keeps transformers' scan of its `models` folder between processes (the module docstring).

    Nothing is imported here: `jaxeval --help` or `ls` never loads transformers. The change is made
    by an import hook the moment transformers' `utils.import_utils` module has run, before any other
    transformers module asks it about torch or scans its models."""
    if "transformers" in sys.modules:
        return False
    hide = os.environ.get(KEEP_TORCH, "0") in ("0", "", "false", "False")
    hide = hide and "torch" not in sys.modules
    cache = structure_cache_dir()
    if not hide and cache is None:
        return False
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TransformersStartup)]
    sys.meta_path.insert(0, _TransformersStartup(hide_torch=hide, cache=cache))
    return hide


def structure_cache_dir() -> Path | None:
    """Where transformers' import structures are kept (None: `JAXEVAL_STARTUP_CACHE=off`)."""
    setting = os.environ.get(STARTUP_CACHE)
    if setting is not None and setting.strip().lower() in OFF:
        return None
    if setting:
        return Path(setting).expanduser()
    return cache_home() / "startup"


def _hide_torch(import_utils: types.ModuleType) -> None:
    found = import_utils._is_package_available

    def available(pkg_name: str, return_version: bool = False):
        if pkg_name == "torch":
            return (False, "N/A") if return_version else False
        return found(pkg_name, return_version)

    import_utils._is_package_available = available
    import_utils.is_torch_available.cache_clear()


@functools.lru_cache
def _source_files(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(relative path, size, mtime in ns) of every .py file under `folder`, sorted; walked once a
    process (transformers scans its `models` folder twice, each scan keyed by this)."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                full = os.path.join(root, name)
                st = os.stat(full)
                out.append((os.path.relpath(full, folder), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _structure_key(module_path: Any, prefix: str | None) -> str:
    from importlib.metadata import version

    where = Path(module_path)
    folder = where if where.is_dir() else where.parent
    sources = _source_files(folder)
    if not sources:  # not a folder of source files (a zipped install): nothing to key it by
        raise ValueError(f"no source files under {folder}")
    parts = [version("transformers"), str(where), prefix, sources]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _to_json(structure: dict) -> list:
    return [[sorted(k), {m: sorted(v) for m, v in d.items()}] for k, d in structure.items()]


def _strings(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def _from_json(rows: list) -> dict:
    """The structure `_to_json` wrote; ValueError for rows of any other type."""
    if type(rows) is not list:
        raise ValueError("the structure is not a list of rows")
    out: dict = {}
    for row in rows:
        if type(row) is not list or len(row) != 2 or not _strings(row[0]):
            raise ValueError("a row is not [backends, modules]")
        backends, modules = row
        if type(modules) is not dict or not all(_strings(v) for v in modules.values()):
            raise ValueError("a row's modules are not {module: [names]}")
        out[frozenset(backends)] = {m: set(v) for m, v in modules.items()}
    return out


def _digest(key: str, rows: list) -> str:
    return hashlib.sha256(json.dumps([key, rows]).encode()).hexdigest()


def encode_entry(key: str, structure: dict) -> bytes:
    """The bytes of the entry kept for `structure` under `key` (the module docstring)."""
    rows = _to_json(structure)
    return json.dumps(
        {"format": ENTRY_FORMAT, "digest": _digest(key, rows), "structure": rows}
    ).encode()


def decode_entry(key: str, raw: bytes) -> dict | None:
    """The structure an entry holds; None for an older format (scanned again quietly); ValueError
    when it is not what `encode_entry` wrote under `key`."""
    data = json.loads(raw)
    if type(data) is list:
        return None  # an older jaxeval's entry
    if type(data) is not dict or data.get("format") != ENTRY_FORMAT:
        raise ValueError("not a start-up cache entry of this format")
    rows = data.get("structure")
    structure = _from_json(rows)
    if data.get("digest") != _digest(key, rows):
        raise ValueError("its digest does not match its structure")
    return structure


def _cache_structures(import_utils: types.ModuleType, cache: Path) -> None:
    """`define_import_structure` read from `cache` when a scan of the same sources is kept there,
    else scanned by transformers and kept (written to a temporary file and renamed into place)."""
    scan = import_utils.define_import_structure

    @functools.lru_cache
    def define_import_structure(module_path, prefix=None):
        try:
            key = _structure_key(module_path, prefix)
        except (OSError, ValueError, ImportError):
            return scan(module_path, prefix)
        entry = cache / f"{key}.json"
        raw = read_private(entry, MAX_ENTRY_BYTES)
        if raw is not None:
            try:
                kept = decode_entry(key, raw)
                if kept is not None:
                    return kept
            except (ValueError, TypeError, RecursionError) as e:
                log.warning("the start-up cache entry %s is damaged (%s); scanning again", entry, e)
        structure = scan(module_path, prefix)
        try:
            write_private(entry, encode_entry(key, structure))
        except (TypeError, ValueError):
            pass  # a structure JSON cannot hold: the scan stands
        return structure

    import_utils.define_import_structure = define_import_structure


class _TransformersStartup(importlib.abc.MetaPathFinder):
    """Finds transformers' `utils.import_utils` as the path finder would and patches it once run:
    torch hidden (`hide_torch`), the import structures kept in `cache` (None: not)."""

    TARGET = "transformers.utils.import_utils"

    def __init__(self, *, hide_torch: bool, cache: Path | None):
        self.hide_torch, self.cache = hide_torch, cache

    def find_spec(self, fullname, path, target=None):
        if fullname != self.TARGET:
            return None
        sys.meta_path.remove(self)  # once; the module is imported once per process
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            if self.hide_torch:
                _hide_torch(module)
            if self.cache is not None and hasattr(module, "define_import_structure"):
                _cache_structures(module, self.cache)

        spec.loader.exec_module = exec_module
        return spec


def quiet_transformers_advice() -> None:
    """No transformers advice lines from the command: without torch (or with torch hidden, above)
    transformers prints "PyTorch was not found. Models won't be available" at import, advice for
    its own models, which jaxeval never runs. Its advisory switch stays the user's to set."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
