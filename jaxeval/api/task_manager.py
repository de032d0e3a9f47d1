"""Task discovery and construction: names, tags, groups and YAML paths -> `Task` / `Group` objects.

The index walks `jaxeval/tasks/**/*.yaml` (sorted), then each `--include_path` (later paths override
earlier ones). A file with `group:` is a group, with `task:` a task; each `tag:` value names a set of
tasks (loading a tag yields its tasks in sorted order, with no aggregation).

    tm = TaskManager(include_path="my_tasks/")
    loaded = tm.load(["arc_easy", "mmlu_stem", "path/to/custom.yaml"])
    loaded.tasks  -> {"arc_easy": Task, "mmlu_anatomy": Task, ...}
    loaded.groups -> {"mmlu_stem": Group}
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import logging
from importlib import resources
from pathlib import Path
from typing import Any

from jaxeval.api.config import GROUP_FIELDS, GroupConfig, TaskConfig
from jaxeval.api.data import find_local_files
from jaxeval.api.group import Group
from jaxeval.api.task import Task
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)
_IGNORE_DIRS = {"__pycache__", ".ipynb_checkpoints"}


class Kind(enum.Enum):
    TASK = "task"
    GROUP = "group"
    TAG = "tag"


@dataclasses.dataclass
class Entry:
    name: str
    kind: Kind
    yaml_path: Path | None
    cfg: dict | None = None
    tags: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class LoadedTasks:
    tasks: dict[str, Task]
    groups: dict[str, Group]

    @property
    def group_map(self) -> dict[str, list[str]]:
        return {g.name: g.child_names for g in self.groups.values()}


def builtin_task_dir() -> Path:
    return Path(str(resources.files("jaxeval.tasks")))


def _as_set(value: Any) -> set[str]:
    if value is None:
        return set()
    return {value} if isinstance(value, str) else set(value)


def _kind_of(cfg: dict, path: Path | None) -> Kind:
    if "class" in cfg:
        raise JaxevalError("Python task classes (`class:`) are not supported; write the task as YAML",
                           file=str(path))
    if "group" in cfg:
        return Kind.GROUP
    if "task" in cfg:
        return Kind.TASK
    raise JaxevalError(f"a task YAML needs a 'task' or 'group' key (keys: {sorted(cfg)})", file=str(path))


def build_index(paths: list[Path]) -> dict[str, Entry]:
    index: dict[str, Entry] = {}
    for root in paths:
        found: dict[str, Entry] = {}
        files = sorted((p for p in Path(root).glob("**/*.yaml") if not _IGNORE_DIRS & set(p.parts)),
                       key=lambda p: p.as_posix())
        for path in files:
            try:
                cfg = load_yaml(path, resolve_functions=False)
                kind = _kind_of(cfg, path)
            except JaxevalError as e:
                log.debug("skipping %s: %s", path, e)
                continue
            name = cfg["group"] if kind is Kind.GROUP else cfg["task"]
            if not isinstance(name, str):
                log.debug("skipping %s: name is not a string", path)
                continue
            if name in found:
                log.warning("duplicate task/group name %r in %s (first in %s); keeping the first",
                            name, path, found[name].yaml_path)
                continue
            found[name] = Entry(name, kind, path, cfg, _as_set(cfg.get("tag")))
            if kind is Kind.TASK:
                for tag in _as_set(cfg.get("tag")):
                    found.setdefault(tag, Entry(tag, Kind.TAG, None)).tags.add(name)
        for name, entry in found.items():
            if name in index and index[name].kind is not Kind.TAG:
                log.info("%s from %s overrides %s", name, entry.yaml_path, index[name].yaml_path)
            index[name] = entry
    return index


class TaskManager:
    """Finds tasks by name, tag, group or YAML path and builds them."""

    def __init__(self, include_path: str | list[str] | None = None, *, include_defaults: bool = True,
                 metadata: dict | None = None, data_files: dict[str, dict[str, str]] | None = None,
                 data_dir: str | None = None):
        paths = [builtin_task_dir()] if include_defaults else []
        for p in [include_path] if isinstance(include_path, str) else (include_path or []):
            if not Path(p).is_dir():
                raise JaxevalError(f"--include_path {p} is not a directory", field="include_path")
            paths.append(Path(p))
        self.paths = paths
        self.index = build_index(paths)
        self.metadata = dict(metadata or {})
        self.data_files = dict(data_files or {})
        if data_dir is not None and not Path(data_dir).is_dir():
            raise JaxevalError(f"--data_dir {data_dir} is not a directory", field="data_dir")
        self.data_dir = data_dir

    # ------------------------------------------------------------------ listing
    def names(self, kind: Kind | None = None) -> list[str]:
        return sorted(n for n, e in self.index.items() if kind is None or e.kind is kind)

    @property
    def all_tasks(self) -> list[str]:
        return self.names(Kind.TASK)

    @property
    def all_groups(self) -> list[str]:
        return self.names(Kind.GROUP)

    @property
    def all_tags(self) -> list[str]:
        return self.names(Kind.TAG)

    def listing(self) -> list[tuple[str, str, str]]:
        """(name, kind, path or members) rows for `jaxeval ls`."""
        rows = []
        for name in sorted(self.index):
            e = self.index[name]
            where = ", ".join(sorted(e.tags)) if e.kind is Kind.TAG else str(e.yaml_path)
            rows.append((name, e.kind.value, where))
        return rows

    # ------------------------------------------------------------------ loading
    def load(self, specs: str | list[Any]) -> LoadedTasks:
        specs = [specs] if not isinstance(specs, list) else specs
        built: list[Any] = []
        for spec in specs:
            obj = self._load_spec(spec)
            built.extend(obj if isinstance(obj, list) else [obj])
        tasks: dict[str, Task] = {}
        groups: dict[str, Group] = {}
        seen: dict[str, str] = {}
        for item in built:
            leaves = item.all_tasks() if isinstance(item, Group) else [item]
            if isinstance(item, Group):
                groups[item.name] = item
                for g in item.all_groups():
                    groups[g.name] = g
            for t in leaves:
                if t.name in seen and seen[t.name] != item.name:
                    raise JaxevalError(f"task '{t.name}' is requested twice (in '{seen[t.name]}' and "
                                       f"'{item.name}')", field="tasks", hint="request it once")
                seen[t.name] = item.name
                tasks[t.name] = t
        return LoadedTasks(tasks, groups)

    def _load_spec(self, spec: Any) -> Any:
        if isinstance(spec, (Task, Group)):
            return spec
        if isinstance(spec, dict):
            kind = _kind_of(spec, None)
            name = spec["group"] if kind is Kind.GROUP else spec["task"]
            entry = self.index.get(name) if name in self.index else Entry(name, kind, None, spec)
            return self._build(entry, overrides=spec if entry.cfg is not spec else None)
        if not isinstance(spec, str):
            raise JaxevalError(f"cannot load a task from {type(spec).__name__}", field="tasks")
        if spec in self.index:
            return self._build(self.index[spec])
        path = Path(spec).expanduser()
        if path.suffix in (".yaml", ".yml") or path.is_file():
            if not path.is_file():
                raise JaxevalError(f"task file {spec} does not exist", field="tasks")
            cfg = load_yaml(path, resolve_functions=False)
            kind = _kind_of(cfg, path)
            name = cfg["group"] if kind is Kind.GROUP else cfg["task"]
            return self._build(Entry(name, kind, path.resolve(), cfg))
        if path.is_dir():
            index = build_index([path])
            return [self._build(e) for e in index.values() if e.kind is Kind.TASK]
        close = difflib.get_close_matches(spec, list(self.index), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else \
            "run `jaxeval ls tasks` to list tasks, or pass --include_path DIR for your own YAMLs"
        raise JaxevalError(f"unknown task, group or tag '{spec}'", field="tasks", hint=hint)

    def _full_config(self, entry: Entry, overrides: dict | None) -> dict:
        cfg = copy.deepcopy(load_yaml(entry.yaml_path)) if entry.yaml_path else copy.deepcopy(entry.cfg or {})
        if overrides:
            cfg = {**cfg, **overrides}
        meta = cfg.get("metadata") or {}
        meta = dict(meta) if isinstance(meta, dict) else {"_metadata": meta}
        meta.update(self.metadata)
        meta["config_source"] = str(entry.yaml_path) if entry.yaml_path else "inline"
        cfg["metadata"] = meta
        return cfg

    def _build(self, entry: Entry, overrides: dict | None = None) -> Any:
        if entry.kind is Kind.TAG:
            return [self._build_task(self.index[n], overrides) for n in sorted(entry.tags) if n in self.index]
        if entry.kind is Kind.GROUP:
            cfg = copy.deepcopy(load_yaml(entry.yaml_path)) if entry.yaml_path else copy.deepcopy(entry.cfg)
            return self._build_group(entry.name, cfg, overrides, source=entry.yaml_path)
        return self._build_task(entry, overrides)

    def _build_task(self, entry: Entry, overrides: dict | None) -> Task:
        cfg = self._full_config(entry, overrides)
        for key in ("tag", "group", "task_list"):
            cfg.pop(key, None)
        config = TaskConfig.from_dict(cfg, source=str(entry.yaml_path) if entry.yaml_path else None)
        return Task(config, data_files=self._local_files(config))

    def _local_files(self, config: TaskConfig) -> dict[str, str] | None:
        """Explicit `data_files` for the task, else files found under `--data_dir`, else None (hub)."""
        if config.task in self.data_files:
            return self.data_files[config.task]
        if self.data_dir is None:
            return None
        splits = [s for s in (config.training_split, config.validation_split, config.test_split,
                              config.fewshot.split) if s]
        return find_local_files(self.data_dir, dataset_path=config.dataset_path,
                                dataset_name=config.dataset_name, splits=list(dict.fromkeys(splits)))

    def _build_group(self, name: str, raw: dict, overrides: dict | None, *, source: Path | None) -> Group:
        group_dict = {k: v for k, v in raw.items() if k in GROUP_FIELDS}
        group_dict["group"] = name
        gcfg = GroupConfig(**group_dict)
        gcfg = dataclasses.replace(gcfg, metadata={**(gcfg.metadata or {}), **self.metadata})
        group = Group.from_config(gcfg)
        shared = {k: v for k, v in raw.items() if k not in GROUP_FIELDS}
        merged = {**shared, **(overrides or {})}
        members = raw.get("task")
        if isinstance(members, str):
            members = [members]
        for item in members or []:
            for child in self._build_member(item, name, merged, source):
                group.add(child)
        return group

    def _build_member(self, item: Any, group: str, overrides: dict, source: Path | None) -> list[Any]:
        if isinstance(item, dict) and "group" in item:
            child = item["group"]
            if child in self.index:
                return [self._build(self.index[child], {**overrides, **{k: v for k, v in item.items()
                                                                          if k != "group"}})]
            return [self._build_group(f"{group}::{child}", item, overrides, source=source)]
        if isinstance(item, dict):
            if "task" not in item:
                raise JaxevalError(f"a member of group '{group}' needs a 'task' or 'group' key",
                                   file=str(source) if source else None, field="task")
            base, item_overrides = item["task"], {**overrides, **item}
        elif isinstance(item, str):
            base, item_overrides = item, overrides
        else:
            raise JaxevalError(f"unsupported member {item!r} in group '{group}'",
                               file=str(source) if source else None, field="task")
        if base not in self.index:
            if isinstance(item, str):
                close = difflib.get_close_matches(base, list(self.index), n=3, cutoff=0.6)
                raise JaxevalError(f"group '{group}' names unknown task '{base}'",
                                   file=str(source) if source else None, field="task",
                                   hint=f"did you mean {', '.join(map(repr, close))}?" if close else None)
            cfg = {**item_overrides, "task": f"{group}::{base}"}
            return [self._build_task(Entry(cfg["task"], Kind.TASK, None, cfg), None)]
        entry = self.index[base]
        if entry.kind is Kind.GROUP:
            return [self._build(entry, item_overrides)]
        if entry.kind is Kind.TAG:
            return [self._build_task(self.index[n], {"task": n, **item_overrides})
                    for n in sorted(entry.tags) if n in self.index]
        return [self._build_task(entry, {"task": base, **item_overrides})]
