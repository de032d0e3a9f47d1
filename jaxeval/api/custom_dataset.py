"""A task's `custom_dataset: !function ...`, called with local data in place of the hub.

Some lm-eval tasks build their documents in Python: the YAML names a function that is called
with the task's metadata and `dataset_kwargs` and returns {split: rows}. Two kinds reach the
network from inside that function, and jaxeval lets each read local files instead:

* **Hub datasets** (BABILong: `common_utils.load_dataset` calls
  `datasets.load_dataset("RMT-team/babilong-1k-samples", name="4k", split="qa1")`): while the
  function runs, the `datasets` its module sees loads the split from `--data_dir` in the hub
  layout, the config's folder only (also .json, .csv, .parquet), and otherwise from the hub or its
  cache (offline: an error saying which file to put where):

      DIR/babilong-1k-samples/4k/qa1.jsonl

* **RULER's essay haystack** (`niah_utils.niah_single_2` & co. call
  `prepare_niah.get_haystack("essay")`): the `get_haystack` its module sees returns the words of
  the local haystack (`jaxeval.api.haystack`); lm-eval's own `generate_samples` then builds the
  documents from them exactly as it would from the hub's essays.

Only the function's own module globals are rebound, only for the call, under a lock; lm-eval's
modules are as before once it returns (or raises).
"""

from __future__ import annotations

import contextlib
import os
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jaxeval.api.data import check_local_file, local_format
from jaxeval.api.haystack import find_haystack, local_get_haystack
from jaxeval.errors import JaxevalError

RULER_HAYSTACK = "lm_eval.tasks.ruler.prepare_niah"  # the module whose get_haystack is replaced
_EXTS = (".jsonl", ".json", ".csv", ".parquet")
_LOCK = threading.RLock()


def build_custom_dataset(
    fn: Callable[..., Any],
    *,
    task: str,
    metadata: Mapping[str, Any],
    dataset_kwargs: Mapping[str, Any],
    data_dir: str | None,
) -> Any:
    """`fn(**metadata, **dataset_kwargs)`, with hub data and RULER's essay haystack read locally."""
    names = getattr(fn, "__globals__", None)
    with _LOCK, contextlib.ExitStack() as stack:
        if isinstance(names, dict):
            original = names.get("get_haystack")
            if getattr(original, "__module__", None) == RULER_HAYSTACK:
                path = find_haystack(metadata, data_dir, task=task)
                replacement = local_get_haystack(original, task=task, path=path)
                stack.enter_context(_rebound(names, "get_haystack", replacement))
            real = names.get("datasets")
            if isinstance(real, types.ModuleType) and real.__name__ == "datasets":
                stack.enter_context(_rebound(names, "datasets", LocalHub(real, task, data_dir)))
        return fn(**metadata, **dataset_kwargs)


@contextlib.contextmanager
def _rebound(names: dict, key: str, value: Any) -> Iterator[None]:
    before = names[key]
    names[key] = value
    try:
        yield
    finally:
        names[key] = before


class LocalHub(types.ModuleType):
    """The `datasets` module as a task helper sees it during `build_custom_dataset`: everything is
    the real module's, except that `load_dataset(hub_id, name, split=...)` reads `--data_dir`."""

    def __init__(self, real: types.ModuleType, task: str, data_dir: str | None):
        super().__init__("datasets")
        self._real, self._task, self._data_dir = real, task, data_dir

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def load_dataset(self, path: str, name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        split = kwargs.get("split")
        local = self._local_files(path, name, split) if not args else None
        if local:
            for file in local.values():
                check_local_file(file, task=self._task)
            fmt = local_format(next(iter(local.values())))
            return self._real.load_dataset(fmt, data_files=local, split=split)
        try:
            return self._real.load_dataset(path, name, *args, **kwargs)
        except Exception as e:  # datasets raises many types; we only add where to put the files
            raise JaxevalError(
                f"could not load dataset '{path}' (name={name!r}, split={split!r}): "
                f"{type(e).__name__}: {e}",
                task=self._task,
                field="dataset_path",
                hint=self._hint(path, name, split),
            ) from None

    def _local_files(self, path: str, name: str | None, split: Any) -> dict[str, str] | None:
        """{split: file} in `DIR/<repo>/<name>/` (the config's own folder only: a BABILong config
        is a context length, so another config's rows must never stand in), else None."""
        if self._data_dir is None or not isinstance(path, str) or os.path.exists(path):
            return None
        splits = [split] if isinstance(split, str) else ["train", "validation", "test"]
        folder = self._folder(path, name)
        found = {}
        for s in splits:
            file = next(
                (f for f in (os.path.join(folder, s + e) for e in _EXTS) if os.path.isfile(f)),
                None,
            )
            if file is not None:
                found[s] = file
        return found or None

    def _folder(self, path: str, name: str | None) -> str:
        base = os.path.join(self._data_dir or "DIR", path.rstrip("/").split("/")[-1])
        return os.path.join(base, name) if name else base

    def _hint(self, path: str, name: str | None, split: Any) -> str:
        file = os.path.join(
            self._folder(path, name), f"{split if isinstance(split, str) else '<split>'}{_EXTS[0]}"
        )
        if self._data_dir is None:
            return f"give local copies with --data_dir DIR holding {file} (docs/tasks.md)"
        return f"no local copy under --data_dir: put the rows in {file} (or .json, .csv, .parquet)"
