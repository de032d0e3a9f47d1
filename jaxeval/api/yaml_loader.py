"""Task YAML loading: `!function` resolved relative to the file that holds it, `include` merged.

    # tasks/arc/arc_easy.yaml                # tasks/arc/utils.py
    include: _arc_base.yaml                  def process(dataset): ...
    task: arc_easy
    process_docs: !function utils.process

`include` files are merged in order and the including file's keys win; `task_list` is not inherited.
A `!function` tag inside an included template resolves against the template's own folder, so
`xquad/xquad_de.yaml` including `xquad_common_yaml` (`!function utils.process_results_qa`) reads
`xquad/utils.py`.

What `!function a.b.name` may reach. Checked before anything is imported:

* every dotted part is non-empty (no leading, trailing or doubled dot: `.tmp.x.evil.fn` would
  otherwise name the absolute /tmp/x/evil.py), and
* the module is `<folder of the YAML>/a/b.py` (lm-eval's rule), whose real path, symbolic links
  followed, lies inside the YAML's real folder; or a module of an installed task package,
  `jaxeval.tasks.*` or lm-eval's `lm_eval.tasks.*`.

Importing the module then runs its top-level code, as any Python import (and lm-eval) does: a helper
file inside a task folder is code you run. After the import, the name must be a function, class
(e.g. a `Filter` subclass) or `functools.partial` that the module defines, or re-exports from
lm-eval / jaxeval: `!function os.system` is an error naming the file and the tag before anything is
imported, and `!function utils.system`, where utils.py did `from os import system`, after utils.py
has run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from jaxeval.api import compat
from jaxeval.errors import JaxevalError
from jaxeval.metrics.hf_evaluate import local_load

log = logging.getLogger(__name__)
TASK_PACKAGES = ("jaxeval.tasks", "lm_eval.tasks")
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class FunctionRef(str):
    """An unresolved `!function` reference (used when indexing: no code runs)."""


_FunctionRef = FunctionRef  # the older private name


def module_name_for(path: Path) -> str:
    """The `sys.modules` name of a task helper file.

    A file inside an installed task package gets its package name, so that helpers importing each
    other (`from lm_eval.tasks.bbh.utils import X`) share one module object:

        .../site-packages/lm_eval/tasks/bbh/cot_zeroshot/utils.py -> lm_eval.tasks.bbh.cot_zeroshot.utils
        /home/me/my_tasks/utils.py -> jaxeval_task_modules.utils_3f2a9c1e (hash of the full path)
    """
    parts = path.with_suffix("").parts
    for pkg in TASK_PACKAGES:
        top, sub = pkg.split(".")
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] == top and parts[i + 1] == sub:
                rest = parts[i + 2 :]
                if rest and all(p.isidentifier() for p in rest):
                    return ".".join((top, sub, *rest))
                break
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() else "_" for c in parts[-1])
    return f"jaxeval_task_modules.{stem}_{digest}"


@contextlib.contextmanager
def _local_evaluate_metrics(path: Path) -> Iterator[None]:
    """While a helper that mentions HF `evaluate` runs its top level, `evaluate.load` serves the
    metrics jaxeval implements (jaxeval/metrics/hf_evaluate.py) instead of downloading them; other
    names still go to evaluate. Helpers that bind `from evaluate import load` keep the local one."""
    try:
        uses = b"evaluate" in path.read_bytes()
    except OSError:
        uses = False
    if not uses or importlib.util.find_spec("evaluate") is None:
        yield
        return
    import evaluate

    original = evaluate.load
    if getattr(original, "jaxeval_local", False):
        yield
        return
    evaluate.load = local_load(original)
    try:
        yield
    finally:
        evaluate.load = original


def _hub_offline() -> bool:
    """Whether the run is offline (`HF_HUB_OFFLINE` / `HF_DATASETS_OFFLINE`, which jaxeval's CLI
    sets when the hub cannot be reached)."""
    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


@contextlib.contextmanager
def _offline_nltk_downloads(path: Path) -> Iterator[None]:
    """While an offline run imports a helper from a folder whose code calls `nltk.download` (RULER's
    `prepare_niah.py` and IFEval's `instructions_util.py` fetch punkt_tab at import when it is
    missing), `nltk.download` reaches no network: it logs and returns False, as nltk does when the
    download fails. Whether the data is needed is checked where it is used (punkt_tab:
    `jaxeval.api.requirements`, `jaxeval.api.haystack`)."""
    if not _hub_offline() or importlib.util.find_spec("nltk") is None:
        yield
        return
    try:
        mentions = any(b"nltk.download" in p.read_bytes() for p in path.parent.glob("*.py"))
    except OSError:
        mentions = False
    if not mentions:
        yield
        return
    import nltk

    original = nltk.download

    def download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        log.info("offline: nltk.download(%r) skipped while importing %s", info_or_id, path)
        return False

    nltk.download = download
    try:
        yield
    finally:
        nltk.download = original


def _load_module(path: Path) -> Any:
    name = module_name_for(path)
    mtime = path.stat().st_mtime_ns
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        if getattr(existing, "__jaxeval_mtime__", mtime) == mtime:
            return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__jaxeval_mtime__ = mtime  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        with _local_evaluate_metrics(path), _offline_nltk_downloads(path):
            spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.modules.pop(name, None)
        if compat.install(e.name):  # a module newer libraries dropped: serve our stand-in, retry
            return _load_module(path)
        raise
    except BaseException:
        # A half-run module must not be found next time (it would lack the names after the failure).
        sys.modules.pop(name, None)
        raise
    return module


# Besides the module itself, helpers may re-export what these packages define (lm-eval's own task
# helpers do: `from lm_eval.utils import weighted_f1_score` "referenced as !function utils.X").
_LIBRARY_PREFIXES = ("lm_eval.", "jaxeval.", "jaxeval_task_modules.")


def _defined_in(obj: Any, module: Any) -> bool:
    if isinstance(obj, functools.partial):
        return _defined_in(obj.func, module)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False
    owner = getattr(obj, "__module__", None) or ""
    return owner == module.__name__ or owner.startswith(_LIBRARY_PREFIXES)


def _helper_path(
    qualname: str, mod_path: str, fn_name: str, base_dir: Path, *, source: Path
) -> Path:
    """The helper file `!function a.b.name` names: `<base_dir>/a/b.py` (lm-eval's rule), refused
    unless every dotted part is non-empty and its real path (links followed) is inside the real
    `base_dir`. A leading dot would otherwise make it absolute: `.tmp.x.evil` -> /tmp/x/evil.py."""
    tag = f"!function {qualname}"
    if "" in mod_path.split(".") or not fn_name:
        raise JaxevalError(
            f"{tag}: the name has an empty part (a leading, trailing or doubled dot)",
            file=str(source),
            field="!function",
            hint="write !function module.function_name, the module a file inside the YAML's "
            "folder, e.g. !function utils.process_docs for utils.py beside the YAML",
        )
    folder = base_dir.resolve()
    local = (folder / f"{mod_path.replace('.', '/')}.py").resolve()
    if not local.is_relative_to(folder):
        raise JaxevalError(
            f"{tag}: the module resolves to {local}, outside the YAML's folder {folder}",
            file=str(source),
            field="!function",
            hint="!function may load only a Python file inside the YAML's own folder (or a "
            f"module of {' / '.join(TASK_PACKAGES)}): move the helper there",
        )
    return local


def resolve_function(qualname: str, base_dir: Path, *, source: Path) -> Any:
    """`utils.process_docs` -> the function, from `base_dir/utils.py` or an installed task package."""
    tag = f"!function {qualname}"
    mod_path, _, fn_name = qualname.rpartition(".")
    if not mod_path:
        raise JaxevalError(
            f"{tag} has no module part",
            file=str(source),
            field="!function",
            hint="write !function module.function_name, e.g. !function utils.process_docs",
        )
    local = _helper_path(qualname, mod_path, fn_name, base_dir, source=source)
    in_package = any(mod_path == p or mod_path.startswith(p + ".") for p in TASK_PACKAGES)
    if not local.exists() and not in_package:
        raise JaxevalError(
            f"{tag}: module '{mod_path}' is not beside the YAML ({local} does not exist) and not in "
            f"an installed task package ({', '.join(TASK_PACKAGES)}); nothing else may be called",
            file=str(source),
            field="!function",
            hint=f"put {mod_path.replace('.', '/')}.py next to the YAML file",
        )
    try:
        module = _load_module(local) if local.exists() else importlib.import_module(mod_path)
    except ImportError as e:
        missing = getattr(e, "name", None)
        hint = (
            f"pip install the package that provides '{missing}'"
            if missing
            else "check the module's imports"
        )
        raise JaxevalError(
            f"{tag}: cannot import module '{mod_path}' ({e})",
            file=str(source),
            field="!function",
            hint=hint,
        ) from None
    except Exception as e:  # the helper module itself failed while running its top level
        raise JaxevalError(
            f"{tag}: module '{mod_path}' failed to load ({type(e).__name__}: {e})",
            file=str(source),
            field="!function",
        ) from None
    except SystemExit as e:
        raise JaxevalError(
            f"{tag}: module '{mod_path}' exited while loading ({e})",
            file=str(source),
            field="!function",
        ) from None
    if not hasattr(module, fn_name):
        raise JaxevalError(
            f"{tag}: module '{mod_path}' has no function '{fn_name}'",
            file=str(source),
            field="!function",
        )
    obj = getattr(module, fn_name)
    if not _defined_in(obj, module):
        raise JaxevalError(
            f"{tag}: '{fn_name}' is not a function, class or filter defined in module '{mod_path}'",
            file=str(source),
            field="!function",
            hint="define the function in the helper module itself (imports are not callable from YAML)",
        )
    return obj


def _loader_for(path: Path, resolve_functions: bool) -> type:
    class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
        pass

    def function(loader: Any, node: yaml.Node) -> Any:
        qual = loader.construct_scalar(node)
        if not resolve_functions:
            return FunctionRef(qual)
        return resolve_function(str(qual), path.parent, source=path)

    Loader.add_constructor("!function", function)
    return Loader


def _parse(path: Path, resolve_functions: bool) -> dict:
    try:
        with path.open("rb") as fh:
            cfg = yaml.load(fh, Loader=_loader_for(path, resolve_functions))  # noqa: S506 (safe loader)
    except yaml.YAMLError as e:
        raise JaxevalError(f"malformed YAML: {e}", file=str(path)) from None
    if not isinstance(cfg, dict):
        raise JaxevalError(
            f"expected a mapping at the top level, got {type(cfg).__name__}", file=str(path)
        )
    return cfg


def load_yaml(
    path: str | Path,
    *,
    resolve_functions: bool = True,
    memo: dict[Path, dict] | None = None,
    _seen: tuple[Path, ...] = (),
) -> dict:
    """Loads a task/group YAML with its includes merged; errors name the file.

    `memo` (unresolved loads only) keeps each parsed file, so that indexing thousands of files that
    share a few templates parses every template once.
    """
    path = Path(path).expanduser().resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise JaxevalError(f"include cycle: {chain}", file=str(path))
    if not path.is_file():
        where = f" (included from {_seen[-1]})" if _seen else ""
        raise JaxevalError(f"YAML file not found{where}", file=str(path))
    use_memo = memo is not None and not resolve_functions
    if use_memo and path in memo:  # type: ignore[operator]
        cfg = dict(memo[path])  # type: ignore[index]
    else:
        cfg = _parse(path, resolve_functions)
        if use_memo:
            memo[path] = dict(cfg)  # type: ignore[index]
    includes = cfg.pop("include", None)
    if includes is None:
        return cfg
    merged: dict = {}
    for inc in includes if isinstance(includes, list) else [includes]:
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        inc_cfg = load_yaml(
            inc_path, resolve_functions=resolve_functions, memo=memo, _seen=(*_seen, path)
        )
        inc_cfg.pop("task_list", None)
        merged.update(inc_cfg)
    merged.update(cfg)
    return merged
