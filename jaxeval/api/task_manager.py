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
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any

from jaxeval.api import requirements
from jaxeval.api.config import GROUP_FIELDS, GroupConfig, TaskConfig
from jaxeval.api.data import find_local_files
from jaxeval.api.group import Group
from jaxeval.api.lm_eval_task import SPLITS as CLASS_SPLITS
from jaxeval.api.lm_eval_task import (
    LmEvalTask,
    check_task_class,
    dataset_location,
    make_task_object,
    with_local_data,
)
from jaxeval.api.task import Task
from jaxeval.api.task_index import (
    Entry,
    Kind,
    index_folder,
    kind_of,
    lm_eval_task_dir,
    merge,
    parse_folder,
    scan,
)
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)
__all__ = ["Entry", "Kind", "LoadedTasks", "TaskManager", "build_index", "builtin_task_dir"]


@dataclasses.dataclass
class LoadedTasks:
    tasks: dict[str, Task]
    groups: dict[str, Group]

    @property
    def group_map(self) -> dict[str, list[str]]:
        return {g.name: g.child_names for g in self.groups.values()}


def builtin_task_dir() -> Path:
    return Path(str(resources.files("jaxeval.tasks")))


def catalogue_enabled() -> bool:
    """lm-eval's catalogue is indexed unless `JAXEVAL_CATALOGUE=0`."""
    return os.environ.get("JAXEVAL_CATALOGUE", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
    )


def _kind_of(cfg: dict, path: Path | None) -> Kind:
    return kind_of(cfg, path)


def build_index(paths: list[Path], *, source: str = "include") -> dict[str, Entry]:
    """The index of `paths` (later paths win), parsed afresh (no cache)."""
    folders = []
    for root in paths:
        files, _ = scan(Path(root).resolve())
        folders.append(parse_folder(Path(root).resolve(), files, source))
    return merge(folders)


class TaskManager:
    """Finds tasks by name, tag, group or YAML path and builds them."""

    def __init__(
        self,
        include_path: str | list[str] | None = None,
        *,
        include_defaults: bool = True,
        catalogue: bool | None = None,
        metadata: dict | None = None,
        data_files: dict[str, dict[str, str]] | None = None,
        data_dir: str | None = None,
    ):
        """`catalogue`: index lm-eval's installed task folder under ours (default: when installed,
        unless JAXEVAL_CATALOGUE=0; never without `include_defaults`)."""
        roots: list[tuple[Path, str]] = []
        if catalogue is None:
            catalogue = include_defaults and catalogue_enabled()
        self.catalogue_dir = lm_eval_task_dir() if catalogue else None
        if self.catalogue_dir is not None:
            roots.append((self.catalogue_dir, "lm-eval"))
        if include_defaults:
            roots.append((builtin_task_dir(), "jaxeval"))
        for p in [include_path] if isinstance(include_path, str) else (include_path or []):
            if not Path(p).is_dir():
                raise JaxevalError(f"--include_path {p} is not a directory", field="include_path")
            roots.append((Path(p), "include"))
        self.paths = [r for r, _ in roots]
        self.index = merge([index_folder(r, src) for r, src in roots])
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
        """(name, kind, "source: path or members") rows for `jaxeval ls`.

        arc_easy      task   jaxeval: .../jaxeval/tasks/arc/arc_easy.yaml
        bbh           group  lm-eval: .../lm_eval/tasks/bbh/...
        ai2_arc       tag    jaxeval: arc_challenge, arc_easy
        """
        rows = []
        for name in sorted(self.index):
            e = self.index[name]
            if e.kind is Kind.TAG:
                members = sorted(e.tags)
                where = ", ".join(members[:8]) + (
                    f", ... ({len(members)} tasks)" if len(members) > 8 else ""
                )
            else:
                where = str(e.yaml_path)
            rows.append((name, e.kind.value, f"{e.source}: {where}"))
        return rows

    def source_of(self, name: str) -> str:
        """ "jaxeval", "lm-eval" or "include" (KeyError for an unknown name)."""
        return self.index[name].source

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
                    raise JaxevalError(
                        f"task '{t.name}' is requested twice (in '{seen[t.name]}' and "
                        f"'{item.name}')",
                        field="tasks",
                        hint="request it once",
                    )
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
            py_class = str(cfg["class"]) if kind is Kind.TASK and "class" in cfg else None
            return self._build(Entry(name, kind, path.resolve(), cfg, py_class=py_class))
        if path.is_dir():
            index = build_index([path])
            return [self._build(e) for e in index.values() if e.kind is Kind.TASK]
        raise JaxevalError(
            f"unknown task, group or tag '{spec}'", field="tasks", hint=self._unknown_hint(spec)
        )

    def _unknown_hint(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.index), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        if self.catalogue_dir is None and lm_eval_task_dir() is None:
            return hint + (
                "jaxeval's own library does not have it; lm-eval's catalogue (13,000+ tasks: bbh, "
                'mmlu_pro, leaderboard, ...) comes with `pip install "jaxeval[tasks]"` (and the '
                'Open LLM Leaderboard\'s dependencies with `pip install "jaxeval[leaderboard]"`)'
            )
        if self.catalogue_dir is None:
            return (
                hint
                + "lm-eval's catalogue is switched off (JAXEVAL_CATALOGUE=0 or catalogue=False)"
            )
        return hint + (
            "run `jaxeval ls tasks` to list tasks, or pass --include_path DIR for your own YAMLs"
        )

    def _full_config(self, entry: Entry, overrides: dict | None) -> dict:
        cfg = (
            copy.deepcopy(load_yaml(entry.yaml_path))
            if entry.yaml_path
            else copy.deepcopy(entry.cfg or {})
        )
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
            return [
                self._build_task(self.index[n], overrides)
                for n in sorted(entry.tags)
                if n in self.index
            ]
        if entry.kind is Kind.GROUP:
            cfg = (
                copy.deepcopy(load_yaml(entry.yaml_path))
                if entry.yaml_path
                else copy.deepcopy(entry.cfg)
            )
            return self._build_group(entry.name, cfg, overrides, source=entry.yaml_path)
        return self._build_task(entry, overrides)

    def _build_task(self, entry: Entry, overrides: dict | None) -> Task | LmEvalTask:
        if entry.py_class is not None:
            return self._build_class_task(entry, overrides)
        config = self.task_config(entry, overrides)
        task = Task(config, data_files=self._local_files(config), data_dir=self.data_dir)
        if entry.source == "lm-eval":
            requirements.check(task, entry.yaml_path, self.catalogue_dir)
        return task

    def task_config(self, entry: Entry | str, overrides: dict | None = None) -> TaskConfig:
        """The task's frozen config, helpers imported, without touching its data."""
        if isinstance(entry, str):
            if entry not in self.index or self.index[entry].kind is not Kind.TASK:
                raise JaxevalError(
                    f"'{entry}' is not a task", field="tasks", hint=self._unknown_hint(entry)
                )
            entry = self.index[entry]
        try:
            cfg = self._full_config(entry, overrides)
        except JaxevalError as e:
            extra = self._extra_for(entry)
            if extra is None or "cannot import" not in e.message:
                raise
            raise JaxevalError(
                e.message,
                task=entry.name,
                file=e.file,
                field=e.field,
                hint=f'{e.hint}; `pip install "{extra}"` brings what it imports'
                if e.hint
                else None,
            ) from None
        for key in ("tag", "group", "task_list"):
            cfg.pop(key, None)
        if "class" in cfg:
            self._refuse_python_task(entry, cfg)
        return TaskConfig.from_dict(cfg, source=str(entry.yaml_path) if entry.yaml_path else None)

    def _extra_for(self, entry: Entry) -> str | None:
        """The jaxeval extra that brings a catalogue task's Python dependencies."""
        if entry.source != "lm-eval" or entry.yaml_path is None or self.catalogue_dir is None:
            return None
        top = Path(entry.yaml_path).relative_to(self.catalogue_dir).parts[0]
        return "jaxeval[leaderboard]" if top == "leaderboard" else "jaxeval[tasks]"

    def _refuse_python_task(self, entry: Entry, cfg: dict) -> None:
        """`task_config` has no TaskConfig for a `class:` task: its config lives in Python."""
        cls = cfg["class"]
        name = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}"
        raise JaxevalError(
            f"task '{entry.name}' is the Python class {name} (`class:` in its YAML); it has no "
            "YAML task config (load it with TaskManager.load, which drives the class)",
            task=entry.name,
            file=str(entry.yaml_path) if entry.yaml_path else None,
            field="class",
        )

    def _class_config(self, entry: Entry, overrides: dict | None) -> tuple[type, dict]:
        cfg = self._full_config(entry, overrides)
        for key in ("tag", "group", "task_list"):
            cfg.pop(key, None)
        cls = check_task_class(
            cfg["class"], task=entry.name, source=str(entry.yaml_path) if entry.yaml_path else None
        )
        return cls, cfg

    def task_class(self, name: str) -> type:
        """The lm-eval Task subclass of a `class:` task, imported and checked (no data read)."""
        return self._class_config(self.index[name], None)[0]

    def _build_class_task(self, entry: Entry, overrides: dict | None) -> LmEvalTask:
        cls, cfg = self._class_config(entry, overrides)
        files = self.data_files.get(entry.name)
        if files is None and self.data_dir is not None:
            path, name = dataset_location(cls, cfg)
            files = find_local_files(
                self.data_dir, dataset_path=path, dataset_name=name, splits=list(CLASS_SPLITS)
            )
        if files:
            cls = with_local_data(cls, files)
        try:
            obj = make_task_object(cls, cfg)
        except JaxevalError:
            raise
        except Exception as e:
            raise JaxevalError(
                f"building the lm-eval task class {cls.__module__}.{cls.__qualname__} failed "
                f"({type(e).__name__}: {e})",
                task=entry.name,
                file=str(entry.yaml_path) if entry.yaml_path else None,
                field="class",
                hint="its hub dataset may be unreachable: pass --data_dir with its files",
            ) from None
        return LmEvalTask(obj, name=entry.name)

    def _local_files(self, config: TaskConfig) -> dict[str, str] | None:
        """Explicit `data_files` for the task, else files found under `--data_dir`, else None (hub)."""
        if config.task in self.data_files:
            return self.data_files[config.task]
        if self.data_dir is None:
            return None
        splits = [
            s
            for s in (
                config.training_split,
                config.validation_split,
                config.test_split,
                config.fewshot.split,
            )
            if s
        ]
        return find_local_files(
            self.data_dir,
            dataset_path=config.dataset_path,
            dataset_name=config.dataset_name,
            splits=list(dict.fromkeys(splits)),
        )

    def _build_group(
        self, name: str, raw: dict, overrides: dict | None, *, source: Path | None
    ) -> Group:
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

    def _build_member(
        self, item: Any, group: str, overrides: dict, source: Path | None
    ) -> list[Any]:
        if isinstance(item, dict) and "group" in item:
            child = item["group"]
            if child in self.index:
                return [
                    self._build(
                        self.index[child],
                        {**overrides, **{k: v for k, v in item.items() if k != "group"}},
                    )
                ]
            return [self._build_group(f"{group}::{child}", item, overrides, source=source)]
        if isinstance(item, dict):
            if "task" not in item:
                raise JaxevalError(
                    f"a member of group '{group}' needs a 'task' or 'group' key",
                    file=str(source) if source else None,
                    field="task",
                )
            base, item_overrides = item["task"], {**overrides, **item}
        elif isinstance(item, str):
            base, item_overrides = item, overrides
        else:
            raise JaxevalError(
                f"unsupported member {item!r} in group '{group}'",
                file=str(source) if source else None,
                field="task",
            )
        if base not in self.index:
            if isinstance(item, str):
                close = difflib.get_close_matches(base, list(self.index), n=3, cutoff=0.6)
                raise JaxevalError(
                    f"group '{group}' names unknown task '{base}'",
                    file=str(source) if source else None,
                    field="task",
                    hint=f"did you mean {', '.join(map(repr, close))}?" if close else None,
                )
            cfg = {**item_overrides, "task": f"{group}::{base}"}
            return [self._build_task(Entry(cfg["task"], Kind.TASK, None, cfg), None)]
        entry = self.index[base]
        if entry.kind is Kind.GROUP:
            return [self._build(entry, item_overrides)]
        if entry.kind is Kind.TAG:
            return [
                self._build_task(self.index[n], {"task": n, **item_overrides})
                for n in sorted(entry.tags)
                if n in self.index
            ]
        return [self._build_task(entry, {"task": base, **item_overrides})]
