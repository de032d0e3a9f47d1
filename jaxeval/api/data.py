"""Dataset loading for tasks: `datasets.load_dataset` with lm-eval's arguments, offline-friendly.

    dataset_path: json
    dataset_kwargs: {data_files: {test: shared/data/ai2_arc/ARC-Easy/test.jsonl}}

`data_overrides` (the CLI's `--data_dir` / the API's `data_files=`) point a hub task at local files
without editing its YAML: `{task_name: {split: path}}`.
"""

from __future__ import annotations

import os
from typing import Any

from jaxeval.errors import JaxevalError

_FORMATS = {
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}


def local_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in _FORMATS:
        raise JaxevalError(f"cannot tell the format of {path}; use one of {sorted(_FORMATS)}")
    return _FORMATS[ext]


_TEXT_FORMATS = (".json", ".jsonl", ".csv", ".txt")


def check_local_file(path: str, *, task: str) -> None:
    """An empty or non-UTF-8 local text file is named here, before `datasets` turns it into a
    StopIteration or a decoding traceback deep inside pyarrow."""
    if not os.path.isfile(path) or not path.lower().endswith(_TEXT_FORMATS):
        return
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise JaxevalError(
            "the data file is empty",
            task=task,
            file=path,
            hint="fill it with one JSON object per line (or CSV rows), or point "
            "the task at the right file",
        )
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise JaxevalError(
            f"the data file is not UTF-8: byte {data[e.start]:#04x} at offset "
            f"{e.start} (line {line})",
            task=task,
            file=path,
            hint="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def _local_paths(files: Any) -> list[str]:
    if isinstance(files, str):
        return [files]
    if isinstance(files, dict):
        return [p for v in files.values() for p in _local_paths(v)]
    if isinstance(files, (list, tuple)):
        return [p for v in files for p in _local_paths(v)]
    return []


def load_task_dataset(
    *,
    task: str,
    dataset_path: str | None,
    dataset_name: str | None,
    dataset_kwargs: dict | None,
    data_files: dict[str, str] | None = None,
) -> Any:
    """Returns a `datasets.DatasetDict` (or the local-files equivalent) for one task."""
    import datasets

    kwargs = dict(dataset_kwargs or {})
    kwargs.pop("trust_remote_code", None)  # not supported by datasets >= 4
    path, name = dataset_path, dataset_name
    if data_files:
        missing = [p for p in data_files.values() if not os.path.exists(p)]
        if missing:
            raise JaxevalError(
                f"local data file(s) not found: {', '.join(missing)}", task=task, field="data_files"
            )
        formats = {local_format(p) for p in data_files.values()}
        if len(formats) != 1:
            raise JaxevalError(
                f"mixed local file formats {sorted(formats)}", task=task, field="data_files"
            )
        path, name = formats.pop(), None
        kwargs = {"data_files": dict(data_files)}
    for local in _local_paths(kwargs.get("data_files")):
        check_local_file(local, task=task)
    if not path:
        raise JaxevalError(
            "no dataset_path",
            task=task,
            field="dataset_path",
            hint="set dataset_path (a hub id, or json/csv/parquet with dataset_kwargs.data_files)",
        )
    try:
        return datasets.load_dataset(path=path, name=name, **kwargs)
    except Exception as e:  # datasets raises many types; we only add context
        offline = (
            os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
        )
        unreachable = offline or "connect" in f"{type(e).__name__} {e}".lower()
        if _damaged_cache(e):
            cache = kwargs.get("cache_dir") or datasets.config.HF_DATASETS_CACHE
            hint = (
                f"the datasets cache {cache} is damaged (an unreadable Arrow file): remove it "
                "(it is rebuilt), or point HF_DATASETS_CACHE elsewhere, or give local copies "
                "with --data_dir DIR"
            )
        elif unreachable:
            hint = (
                "the dataset is not in the local Hugging Face cache and the hub cannot be "
                "reached: give local copies with --data_dir DIR (or data_files; see "
                "docs/tasks.md), or load it once where there is a network so the cache holds it"
            )
        else:
            hint = "check dataset_path, dataset_name and dataset_kwargs"
        raise JaxevalError(
            f"could not load dataset '{path}' (name={name!r}): {type(e).__name__}: {e}",
            task=task,
            field="dataset_path",
            hint=hint,
        ) from None


def _damaged_cache(error: BaseException) -> bool:
    """True for pyarrow's errors on reading a cached Arrow file (truncated, overwritten): the
    datasets cache is damaged, whatever the network."""
    import pyarrow

    return isinstance(error, pyarrow.lib.ArrowException)


def find_local_files(
    data_dir: str, *, dataset_path: str | None, dataset_name: str | None, splits: list[str]
) -> dict[str, str] | None:
    """Maps a hub task onto local files laid out like the hub repository (`--data_dir DIR`).

    For `dataset_path: allenai/ai2_arc`, `dataset_name: ARC-Easy`, split `test` it looks for
    `DIR/ai2_arc/ARC-Easy/test.jsonl`, then `DIR/ai2_arc/test.jsonl`, then `DIR/ARC-Easy/test.jsonl`
    (the last serves configs of collections, e.g. `super_glue` + `boolq` -> `DIR/boolq/`); each also
    as .json, .csv, .parquet. Returns {split: path} for the first folder holding any split, or None.
    """
    if not dataset_path:
        return None
    base = os.path.join(data_dir, dataset_path.rstrip("/").split("/")[-1])
    folders = [os.path.join(base, dataset_name)] if dataset_name else []
    folders.append(base)
    if dataset_name:
        folders.append(os.path.join(data_dir, dataset_name))
    for folder in folders:
        found = {}
        for split in splits:
            for ext in (".jsonl", ".json", ".csv", ".parquet"):
                candidate = os.path.join(folder, split + ext)
                if os.path.isfile(candidate):
                    found[split] = candidate
                    break
        if found:
            return found
    return None
