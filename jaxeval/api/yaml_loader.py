"""Task YAML loading: `!function` resolved relative to the file, `include` merged, cycles caught.

    # tasks/arc/arc_easy.yaml                # tasks/arc/utils.py
    include: _arc_base.yaml                  def process(dataset): ...
    task: arc_easy
    process_docs: !function utils.process

`include` files are merged in order and the including file's keys win; `task_list` is not inherited.
Functions are looked up as `<dir of the yaml>/<module path>.py` first, then as an importable module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import yaml

from jaxeval.errors import JaxevalError


class _FunctionRef(str):
    """An unresolved `!function` reference (used when indexing: no code runs)."""


def _load_module(path: Path):
    name = "jaxeval_task_modules." + "_".join(path.with_suffix("").parts[-3:]).replace("-", "_")
    mtime = path.stat().st_mtime_ns
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path) and getattr(
        existing, "__jaxeval_mtime__", None
    ) == mtime:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__jaxeval_mtime__ = mtime  # type: ignore[attr-defined]
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def resolve_function(qualname: str, base_dir: Path, *, source: Path) -> Any:
    """`utils.process_docs` -> the function, from `base_dir/utils.py` or an importable module."""
    mod_path, _, fn_name = qualname.rpartition(".")
    if not mod_path:
        raise JaxevalError(
            f"!function {qualname!r} has no module part", file=str(source),
            hint="write !function module.function_name, e.g. !function utils.process_docs",
        )
    local = (base_dir / f"{mod_path.replace('.', '/')}.py").resolve()
    try:
        module = _load_module(local) if local.exists() else importlib.import_module(mod_path)
    except ImportError as e:
        raise JaxevalError(
            f"!function {qualname!r}: cannot import module '{mod_path}' ({e})", file=str(source),
            hint=f"put {mod_path.replace('.', '/')}.py next to the YAML file or make it importable",
        ) from None
    if not hasattr(module, fn_name):
        raise JaxevalError(
            f"!function {qualname!r}: module '{mod_path}' has no function '{fn_name}'", file=str(source)
        )
    return getattr(module, fn_name)


def _loader_for(path: Path, resolve_functions: bool) -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    def function(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        qual = loader.construct_scalar(node)  # type: ignore[arg-type]
        if not resolve_functions:
            return _FunctionRef(qual)
        return resolve_function(str(qual), path.parent, source=path)

    Loader.add_constructor("!function", function)
    return Loader


def load_yaml(path: str | Path, *, resolve_functions: bool = True, _seen: tuple[Path, ...] = ()) -> dict:
    """Loads a task/group YAML with its includes merged; errors name the file."""
    path = Path(path).expanduser().resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise JaxevalError(f"include cycle: {chain}", file=str(path))
    if not path.is_file():
        where = f" (included from {_seen[-1]})" if _seen else ""
        raise JaxevalError(f"YAML file not found{where}", file=str(path))
    try:
        with path.open("rb") as fh:
            cfg = yaml.load(fh, Loader=_loader_for(path, resolve_functions))  # noqa: S506 (safe loader)
    except yaml.YAMLError as e:
        raise JaxevalError(f"malformed YAML: {e}", file=str(path)) from None
    if not isinstance(cfg, dict):
        raise JaxevalError(
            f"expected a mapping at the top level, got {type(cfg).__name__}", file=str(path)
        )
    includes = cfg.pop("include", None)
    if includes is None:
        return cfg
    merged: dict = {}
    for inc in includes if isinstance(includes, list) else [includes]:
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        inc_cfg = load_yaml(inc_path, resolve_functions=resolve_functions, _seen=(*_seen, path))
        inc_cfg.pop("task_list", None)
        merged.update(inc_cfg)
    merged.update(cfg)
    return merged
