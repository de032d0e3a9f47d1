"""Runs one task through lm-eval and through jaxeval with the same fake model and local data.

lm-eval reads override YAMLs that `include:` its own task file and point it at local JSON; jaxeval
loads its built-in task by name with the same overrides, finding the data through `data_dir`
(the hub layout, `DIR/<last part of dataset_path>/[<dataset_name>/]<split>.jsonl`) or through
explicit `data_files`:

    case = Case("boolq", "super_glue/boolq/default.yaml", TEST_DATA,
                {"validation": "boolq/validation.jsonl"}, {"fewshot_split": "validation"},
                via="data_files")
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.tasks import fake_lm


@dataclasses.dataclass(frozen=True)
class Case:
    task: str
    lm_eval_yaml: str  # relative to lm_eval/tasks
    root: Path  # data root (a --data_dir)
    files: dict[str, str]  # split -> file relative to root
    overrides: dict = dataclasses.field(default_factory=dict)  # given to both sides
    via: str = "data_dir"  # how jaxeval finds the files: "data_dir" or "data_files"
    generations: tuple[str, ...] = tuple(fake_lm.GENERATIONS)
    gold_of: Callable[[str], str | None] | None = None  # fills "{gold}" in generations

    def paths(self) -> dict[str, str]:
        return {split: str(self.root / rel) for split, rel in self.files.items()}


def lm_eval_tasks_dir() -> str:
    import lm_eval.tasks

    return os.path.dirname(lm_eval.tasks.__file__)


def write_lm_eval_overrides(cases: list[Case], out_dir: Path) -> None:
    for case in cases:
        cfg = {
            "include": os.path.join(lm_eval_tasks_dir(), case.lm_eval_yaml),
            "task": case.task,
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": case.paths()},
            **case.overrides,
        }
        (out_dir / f"{case.task}.yaml").write_text(
            yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)
        )


def run_lm_eval(
    task_manager: Any, case: Case, num_fewshot: int | None, limit: int, log_samples: bool = False
) -> tuple[dict, fake_lm.RequestLog]:
    import lm_eval

    log = fake_lm.RequestLog()
    res = lm_eval.simple_evaluate(
        model=fake_lm.make_lm_eval_lm(log, list(case.generations), case.gold_of),
        tasks=[case.task],
        num_fewshot=num_fewshot,
        limit=limit,
        bootstrap_iters=1000,
        log_samples=log_samples,
        task_manager=task_manager,
    )
    return res, log


def jaxeval_task_manager(case: Case) -> Any:
    from jaxeval.api.task_manager import TaskManager

    if case.via == "data_dir":
        return TaskManager(data_dir=str(case.root))
    return TaskManager(data_files={case.task: case.paths()})


def run_jaxeval(
    case: Case, num_fewshot: int | None, limit: int, log_samples: bool = False
) -> tuple[dict, fake_lm.RequestLog]:
    import jaxeval

    log = fake_lm.RequestLog()
    spec = {"task": case.task, **case.overrides} if case.overrides else case.task
    res = jaxeval.simple_evaluate(
        model=fake_lm.make_jaxeval_lm(log, list(case.generations), case.gold_of),
        tasks=[spec],
        num_fewshot=num_fewshot,
        limit=limit,
        bootstrap_iters=1000,
        log_samples=log_samples,
        task_manager=jaxeval_task_manager(case),
    )
    return res, log


_DEF = re.compile(r"^\s*def (\w+)\(", re.M)
# Where the data comes from differs by design (hub id vs local JSON); compared in test_task_configs.
LOCAL_DATA_KEYS = ("dataset_path", "dataset_name", "dataset_kwargs")


def comparable_config(cfg: dict, drop: tuple[str, ...] = LOCAL_DATA_KEYS) -> dict:
    """A dumped task config with functions (as source text or as objects) replaced by their names
    (each side writes its own helpers), without the data-location keys and the run-specific
    `metadata.config_source`."""

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        if callable(value):
            return f"<function {value.__name__}>"
        if isinstance(value, str):
            m = _DEF.search(value)
            if m and "\n" in value:
                return f"<function {m.group(1)}>"
        return value

    out = {k: norm(v) for k, v in cfg.items() if k not in drop}
    meta = dict(out.get("metadata") or {})
    meta.pop("config_source", None)
    out["metadata"] = meta
    return out


def config_differences(
    ours: dict, theirs: dict, drop: tuple[str, ...] = LOCAL_DATA_KEYS
) -> dict[str, tuple[Any, Any]]:
    """{key: (ours, theirs)} for the top-level keys whose comparable values differ."""
    a, b = comparable_config(ours, drop), comparable_config(theirs, drop)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def assert_same_results(ours: dict, theirs: dict, name: str) -> None:
    a, b = ours["results"][name], theirs["results"][name]
    keys = {k for k in b if "," in k}
    assert keys == {k for k in a if "," in k}, (
        name,
        sorted(keys),
        sorted(k for k in a if "," in k),
    )
    for k in sorted(keys):
        assert a[k] == b[k], (name, k, a[k], b[k])
    for key in ("sample_len", "alias"):
        assert a[key] == b[key], (name, key)
    for key in ("n-shot", "higher_is_better", "n-samples", "versions"):
        assert ours[key][name] == theirs[key][name], (name, key, ours[key][name], theirs[key][name])
    assert not config_differences(ours["configs"][name], theirs["configs"][name])


def assert_same_samples(ours: dict, theirs: dict, name: str) -> None:
    """Per document: id, target, answers after filtering and every metric value."""
    a, b = ours["samples"][name], theirs["samples"][name]
    assert len(a) == len(b), name
    for x, y in zip(a, b):
        keys = ("doc_id", "filter", "target", "filtered_resps", *y["metrics"])
        assert {k: x[k] for k in keys} == {k: y[k] for k in keys}, (name, x["doc_id"])


def assert_same_requests(ours: fake_lm.RequestLog, theirs: fake_lm.RequestLog) -> None:
    for kind in theirs.calls:
        assert ours.calls[kind] == theirs.calls[kind], kind
    assert sum(len(v) for v in ours.calls.values()) > 0
