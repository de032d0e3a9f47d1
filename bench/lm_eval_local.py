"""lm-eval 0.4.13's command line, reading hub datasets from local files laid out as for jaxeval.

    python bench/lm_eval_local.py run --model dummy --tasks arc_easy --data_dir ../shared/data ...

Takes lm-eval's flags plus jaxeval's `--data_dir DIR` (removed before lm-eval parses the rest).
`datasets.load_dataset`, the function lm-eval's `ConfigurableTask.download` calls, is patched so
that a hub `path`/`name` (e.g. `allenai/ai2_arc`, `ARC-Easy`) loads the files jaxeval's
`--data_dir` finds: `DIR/ai2_arc/ARC-Easy/<split>.jsonl`, then `DIR/ai2_arc/<split>.jsonl`, then
`DIR/ARC-Easy/<split>.jsonl` (.jsonl, .json, .csv, .parquet). No YAML is edited.

The splits asked for are the task's own (training, validation, test, few-shot, in that order),
and the call is the one jaxeval makes (`load_dataset("json", data_files={split: path})`), so both
tools share the `datasets` Arrow cache. A split the task names but the folder lacks (ARC's and
HellaSwag's `train`) reads as an empty split with the same columns: lm-eval builds its few-shot
pool from `train` when it builds the task, even at 0-shot, and would otherwise stop with
`KeyError: 'train'`; jaxeval runs such a task at 0-shot, so the documents scored are the same.
Without `--data_dir`, lm-eval runs unpatched.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_LOCAL_BUILDERS = {"json", "csv", "parquet", "arrow", "text"}


def find_files(data_dir: str, path: str, name: str | None, splits: list[str]) -> dict[str, str]:
    """{split: file} from the first folder holding any of `splits` (jaxeval's own lookup)."""
    from jaxeval.api.data import find_local_files

    found = find_local_files(data_dir, dataset_path=path, dataset_name=name, splits=splits)
    return found or {}


def _task_splits() -> list[str]:
    """The splits of the task whose `download` called `load_dataset` (looked up on its frame)."""
    frame = sys._getframe(2)
    while frame is not None:
        config = getattr(frame.f_locals.get("self"), "config", None)
        if config is not None and hasattr(config, "test_split"):
            names = (
                config.training_split,
                config.validation_split,
                config.test_split,
                config.fewshot_split,
            )
            return list(dict.fromkeys(s for s in names if s))
        frame = frame.f_back
    return ["train", "validation", "test", "dev"]


def patch(data_dir: str) -> None:
    """Makes `datasets.load_dataset(hub_path, name)` read `data_dir` where it holds the files."""
    import datasets

    from jaxeval.api.data import local_format

    original = datasets.load_dataset

    class LocalDatasetDict(datasets.DatasetDict):
        def __missing__(self, split: str) -> datasets.Dataset:
            first = next(iter(self.values()))
            return datasets.Dataset.from_dict(
                {c: [] for c in first.column_names}, features=first.features
            )

    def load_dataset(path: str | None = None, name: str | None = None, **kwargs: Any) -> Any:
        kwargs.pop("trust_remote_code", None)
        local = path and path not in _LOCAL_BUILDERS and not kwargs.get("data_files")
        files = find_files(data_dir, path, name, _task_splits()) if local else {}
        if not files:
            return original(path=path, name=name, **kwargs)
        builder = local_format(next(iter(files.values())))
        return LocalDatasetDict(original(path=builder, name=None, data_files=files))

    datasets.load_dataset = load_dataset


def pop_data_dir(argv: list[str]) -> tuple[str | None, list[str]]:
    """(`--data_dir` value or None, argv without it); `--data_dir DIR` and `--data_dir=DIR`."""
    out, data_dir, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--data_dir" and i + 1 < len(argv):
            data_dir, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--data_dir="):
            data_dir = argv[i].split("=", 1)[1]
        else:
            out.append(argv[i])
        i += 1
    return data_dir, out


def main() -> None:
    data_dir, sys.argv = pop_data_dir(sys.argv)
    if data_dir is not None:
        if not os.path.isdir(data_dir):
            raise SystemExit(f"--data_dir {data_dir} is not a directory")
        patch(data_dir)
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
