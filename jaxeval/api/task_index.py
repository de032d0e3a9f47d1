"""The task index: every task, group and tag name -> where it is defined, cached per folder.

Three kinds of folder are indexed, in this order (a later folder wins a name clash):

    lm-eval's installed task folder   source "lm-eval"   (the catalogue; `pip install jaxeval[tasks]`)
    jaxeval.tasks (our library)       source "jaxeval"   (wins over lm-eval: a debug line, no warning)
    each --include_path               source "include"  (wins over both: an info line)

Within one folder files are read in sorted path order and the first definition of a name wins.
A tag's members are the union over folders.

Indexing parses ~15k YAML files for lm-eval's folder (seconds of start-up), so each folder's index is kept
in `$JAXEVAL_INDEX_CACHE` (default `~/.cache/jaxeval/task_index/`), one JSON file per folder,
keyed by every YAML file's relative path, size and modification time:

    key = sha256("v1" + "\\n".join(f"{rel}\\0{size}\\0{mtime_ns}" for each *.yaml / *_yaml file))

A warm start stats the files (no parsing) and reads one JSON file. The cache file is written to a
temporary name and renamed into place (0600, in a 0700 folder: `jaxeval.paths.write_private`), so
concurrent runs never read half a file; a stale file is rebuilt. Nothing here runs task code:
`!function` tags stay unresolved strings.

A cache file is data about the folder, never a list of files to load: it is read only when it is
this user's own (`jaxeval.paths.read_private`), and every row must name one of the YAML files the
scan just found, so no row leads outside the indexed folder. A row that does not (one warning),
or a damaged file, rebuilds the folder's index from its files:

    ["arc_easy", "task", "arc/arc_easy.yaml", ["ai2_arc"], null]     kept: a file the scan found
    ["evil", "task", "../../x/evil.yaml", [], null]                    rebuilt: outside the folder
    ["evil", "task", "/tmp/evil.yaml", [], null]                       rebuilt: not a scanned file
    ["evil", "task", "linked/evil.yaml", [], null]                     rebuilt: a linked folder is
                                                                       never entered by the scan
    [null, "task", "arc/arc_easy.yaml", [], null]                      rebuilt: a name is a string
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError
from jaxeval.paths import cache_dir, read_private, write_private

log = logging.getLogger(__name__)

INDEX_VERSION = "v1"
MAX_INDEX_BYTES = 1 << 28  # a larger index file is not read (the folder is parsed instead)
_IGNORE_DIRS = {"__pycache__", ".ipynb_checkpoints"}
_TEMPLATE_SUFFIXES = (".yaml", ".yml", "_yaml")


class Kind(enum.Enum):
    TASK = "task"
    GROUP = "group"
    TAG = "tag"


@dataclasses.dataclass
class Entry:
    """One indexed name. `py_class` is the unresolved `class: !function m.C` of a Python task.

    The file is kept as given (a str from the cache, a Path from parsing) and made a Path on first
    read: a warm start builds ~14k entries and most are never looked at.
    """

    name: str
    kind: Kind
    yaml_file: str | Path | None
    cfg: dict | None = None
    tags: set[str] = dataclasses.field(default_factory=set)
    source: str = "inline"
    py_class: str | None = None

    @property
    def yaml_path(self) -> Path | None:
        if isinstance(self.yaml_file, str):
            self.yaml_file = Path(self.yaml_file)
        return self.yaml_file


def _as_set(value: Any) -> set[str]:
    if value is None:
        return set()
    return {value} if isinstance(value, str) else {str(v) for v in value}


def kind_of(cfg: dict, path: Path | None) -> Kind:
    """`group:` -> GROUP, `task:` (with or without `class:`) -> TASK."""
    if "group" in cfg:
        return Kind.GROUP
    if "task" in cfg:
        return Kind.TASK
    raise JaxevalError(
        f"a task YAML needs a 'task' or 'group' key (keys: {sorted(cfg)})",
        file=str(path) if path else None,
    )


def index_cache_dir() -> Path:
    return cache_dir("task_index", env="JAXEVAL_INDEX_CACHE")


def scan(root: Path) -> tuple[list[str], str]:
    """(the folder's *.yaml files in sorted order, the cache key of all its YAML and templates).

    Plain strings and `os.scandir`: this is all a warm start does besides reading the JSON, and
    pathlib or `os.path.relpath` per file cost more than the ~15k `stat` calls themselves.
    """
    indexed: list[str] = []
    stamps: list[str] = []
    base = str(root)
    pending = [(base, "")]
    while pending:
        folder, rel = pending.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for item in it:
                name = item.name
                if item.is_dir():
                    # like os.walk: a linked folder is not entered
                    if name not in _IGNORE_DIRS and not item.is_symlink():
                        pending.append((item.path, f"{rel}{name}/"))
                    continue
                if not name.endswith(_TEMPLATE_SUFFIXES):
                    continue
                st = item.stat()
                stamps.append(f"{rel}{name}\0{st.st_size}\0{st.st_mtime_ns}")
                if name.endswith(".yaml"):
                    indexed.append(item.path)
    stamps.sort()
    digest = hashlib.sha256("\n".join([INDEX_VERSION, base, *stamps]).encode()).hexdigest()
    indexed.sort()
    return indexed, digest


def parse_folder(root: Path, files: list[str], source: str) -> dict[str, Entry]:
    """Reads every file (functions unresolved); unreadable files are skipped with a debug line."""
    found: dict[str, Entry] = {}
    memo: dict[Path, dict] = {}
    for file in files:
        path = Path(file)
        try:
            cfg = load_yaml(path, resolve_functions=False, memo=memo)
            kind = kind_of(cfg, path)
        except JaxevalError as e:
            log.debug("skipping %s: %s", path, e)
            continue
        name = cfg["group"] if kind is Kind.GROUP else cfg["task"]
        if not isinstance(name, str):
            log.debug("skipping %s: its name is not a string", path)
            continue
        if name in found:
            log.debug(
                "%s: %r is already defined in %s; keeping the first",
                path,
                name,
                found[name].yaml_path,
            )
            continue
        py_class = str(cfg["class"]) if kind is Kind.TASK and "class" in cfg else None
        found[name] = Entry(name, kind, path, None, _as_set(cfg.get("tag")), source, py_class)
        if kind is Kind.TASK:
            for tag in _as_set(cfg.get("tag")):
                if tag in found and found[tag].kind is not Kind.TAG:
                    log.debug(
                        "%s: tag %r has the name of a %s; ignored", path, tag, found[tag].kind.value
                    )
                    continue
                found.setdefault(tag, Entry(tag, Kind.TAG, None, source=source)).tags.add(name)
    return found


def _to_json(root: Path, entries: dict[str, Entry]) -> list:
    prefix = f"{root}{os.sep}"
    return [
        [
            e.name,
            e.kind.value,
            str(e.yaml_path).removeprefix(prefix) if e.yaml_path else None,
            sorted(e.tags),
            e.py_class,
        ]
        for e in entries.values()
    ]


def _from_json(root: Path, rows: list, source: str, files: list[str]) -> dict[str, Entry]:
    """The entries of the cached `rows`; ValueError when a row is not one `_to_json` writes for
    this folder's scanned `files` (the module docstring)."""
    prefix = f"{root}{os.sep}"
    scanned = set(files)
    out = {}
    for row in rows:
        if type(row) is not list or len(row) != 5:
            raise ValueError(f"a row is not [name, kind, file, tags, class]: {str(row)[:80]}")
        name, kind, rel, tags, py = row
        if type(name) is not str or type(tags) is not list or any(type(t) is not str for t in tags):
            raise ValueError(f"a row's name or tags are not strings: {str(row)[:80]}")
        if py is not None and type(py) is not str:
            raise ValueError(f"{name}: its class is not a string")
        if rel is None and kind != Kind.TAG.value:
            raise ValueError(f"{name}: a {kind} row names no file")
        if rel is not None and (type(rel) is not str or prefix + rel not in scanned):
            raise ValueError(f"{name}: {str(rel)[:80]} is not a YAML file of {root}")
        out[name] = Entry(
            name, Kind(kind), prefix + rel if rel else None, None, set(tags), source, py
        )
    return out


def index_folder(root: Path, source: str, *, use_cache: bool = True) -> dict[str, Entry]:
    """One folder's entries, from the cache when its key still matches."""
    root = Path(root).resolve()
    files, key = scan(root)
    cache_file = index_cache_dir() / f"{hashlib.sha256(str(root).encode()).hexdigest()[:20]}.json"
    raw = read_private(cache_file, MAX_INDEX_BYTES) if use_cache else None
    if raw is not None:
        try:
            data = json.loads(raw)
            if data.get("key") == key:
                return _from_json(root, data["entries"], source, files)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("the task index %s is damaged (%s); indexing %s again", cache_file, e, root)
    entries = parse_folder(root, files, source)
    if use_cache:
        data = {"key": key, "root": str(root), "entries": _to_json(root, entries)}
        if not write_private(cache_file, json.dumps(data).encode("utf-8")):
            log.debug("could not write the task index cache %s", cache_file)
    return entries


def merge(folders: list[dict[str, Entry]]) -> dict[str, Entry]:
    """Later folders win; tags are unions; a clash with lm-eval's catalogue is a debug line."""
    index: dict[str, Entry] = {}
    for found in folders:
        for name, entry in found.items():
            old = index.get(name)
            if old is not None and old.kind is Kind.TAG and entry.kind is Kind.TAG:
                index[name] = dataclasses.replace(entry, tags=old.tags | entry.tags)
                continue
            if old is not None and old.kind is not Kind.TAG:
                level = logging.DEBUG if old.source == "lm-eval" else logging.INFO
                log.log(
                    level,
                    "%s from %s (%s) overrides %s (%s)",
                    name,
                    entry.yaml_path,
                    entry.source,
                    old.yaml_path,
                    old.source,
                )
            index[name] = entry
    return index


def lm_eval_task_dir() -> Path | None:
    """lm-eval's installed task folder, found without importing lm-eval (None if not installed)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("lm_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "tasks"
    return folder if folder.is_dir() else None
