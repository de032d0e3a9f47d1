"""Runs read back from disk: jaxeval's and lm-eval's results files, with their samples.

    out/                                   a folder: every results_*.json under it (its model
      EleutherAI__pythia-160m/               subfolders included) is one run
        results_2024-05-01T10-00-00.5.json
        samples_arc_easy_2024-05-01T10-00-00.5.jsonl      the samples of that run: same date
    out/run_2024-05-01T10-00-00.5.json     a results file named directly (--output_path x.json)

Both programs write the same schema (lm-eval's `EvaluationTracker` layout); `engine` says which
wrote a run (jaxeval adds `jaxeval_version`). A run's training step, when it has one, comes from
an in-memory model's `step`, or a checkpoint name in the model arguments: `step1000` (Pythia's
revisions), `step_1000`, `checkpoint-1000`, `global_step1000`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.report.labels import base_names, run_labels
from jaxeval.results.files import date_id_of, samples_path

# What a sample keeps (its `doc` is dropped: the prompt is in `arguments`).
_SAMPLE_FIELDS = ("doc_id", "filter", "doc_hash", "target", "arguments", "resps", "filtered_resps")
_STEP = re.compile(r"(?:global_step|checkpoint|step)[-_]?(\d+)")
_FOLDER_DEPTH = 3  # out/<model>/results_*.json and one more level


@dataclasses.dataclass(frozen=True)
class Run:
    """One results file and its samples. `samples[task]`: one row per document and filter."""

    label: str
    results_file: Path
    results: dict[str, Any]
    samples: dict[str, list[dict[str, Any]]]
    engine: str
    model: str
    step: int | None
    series: str  # runs of one training run share it: the model with its step taken out

    @property
    def tasks(self) -> list[str]:
        return list(self.results.get("results", {}))

    @property
    def date(self) -> str:
        return date_id_of(self.results_file.name)

    def output_type(self, task: str) -> str | None:
        return self.results.get("configs", {}).get(task, {}).get("output_type")

    def target_delimiter(self, task: str) -> str:
        """What lm-eval puts between a prompt and each choice (" " unless the task says)."""
        delimiter = self.results.get("configs", {}).get(task, {}).get("target_delimiter")
        return " " if delimiter is None else str(delimiter)

    def aggregation(self, task: str, metric: str) -> str | None:
        """The aggregation the task's metric_list names for `metric` (a string), if any."""
        for entry in self.results.get("configs", {}).get(task, {}).get("metric_list") or []:
            if isinstance(entry, dict) and entry.get("metric") == metric:
                agg = entry.get("aggregation")
                return agg if isinstance(agg, str) else None
        return None


def find_results_files(path: Path) -> list[Path]:
    """The results files a path names (module docstring): by folder (numbers in the names as
    numbers: checkpoint-2000 before checkpoint-16000), oldest first within a folder."""
    if not path.exists():
        raise JaxevalError(
            "no such file or folder",
            file=str(path),
            hint="pass the --output_path folder of a run (jaxeval or lm-eval), or a results_<date>.json",
        )
    if path.is_file():
        if path.suffix != ".json":
            raise JaxevalError(
                "not a results file (a samples_*.jsonl file belongs to the results_*.json beside it)",
                file=str(path),
                hint="pass the results_<date>.json file or its folder",
            )
        return [path]
    found = [
        f
        for f in path.rglob("results_*.json")
        if len(f.relative_to(path).parts) <= _FOLDER_DEPTH and not f.name.startswith(".")
    ]
    if not found:
        raise JaxevalError(
            "no results_*.json file in this folder or its model subfolders",
            file=str(path),
            hint="pass the folder given to --output_path (it holds <model>/results_<date>.json)",
        )
    return sorted(found, key=lambda f: (_natural(str(f.parent)), f.name))


def _natural(text: str) -> list[tuple[int, str]]:
    """Sort key reading numbers as numbers: checkpoint-2000 before checkpoint-16000."""
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", text)]


def read_results(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as e:
        raise JaxevalError(f"cannot read: {e.strerror}", file=str(file)) from None
    try:
        results = json.loads(text)
    except json.JSONDecodeError as e:
        raise JaxevalError(
            f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
            file=str(file),
            hint="the file may be cut short; run the evaluation again or pass another run",
        ) from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise JaxevalError(
            'not a results file: no "results" object',
            file=str(file),
            hint="pass a results_<date>.json written by jaxeval or lm-eval",
        )
    return results


def read_samples(file: Path) -> list[dict[str, Any]]:
    rows = []
    with open(file, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise JaxevalError(
                    f"line {number} is not valid JSON ({e.msg})",
                    file=str(file),
                    hint="the file may be cut short; pass the run without it by moving it away",
                ) from None
            if not isinstance(row, dict) or "doc_id" not in row:
                raise JaxevalError(
                    f"line {number} is not a sample (no doc_id)",
                    file=str(file),
                    hint="samples files hold one JSON object per document, as --log_samples writes",
                )
            metric_names = row.get("metrics") or _metric_names(row)
            kept = {k: row[k] for k in _SAMPLE_FIELDS if k in row}
            kept["values"] = {m: row[m] for m in metric_names if m in row}
            rows.append(kept)
    return rows


def _metric_names(row: dict[str, Any]) -> list[str]:
    """Metric keys of a sample that does not list them (numbers outside the known fields)."""
    skip = {*_SAMPLE_FIELDS, "doc", "prompt_hash", "target_hash", "metrics"}
    return [k for k, v in row.items() if k not in skip and isinstance(v, (int, float, list))]


def step_of(results: dict[str, Any]) -> tuple[int | None, str]:
    """(training step, series name): see the module docstring."""
    config = results.get("config", {})
    model = str(results.get("model_name") or "")
    in_memory = config.get("in_memory") or {}
    if in_memory.get("step") is not None:
        return int(in_memory["step"]), str(in_memory.get("name") or model or "in-memory")
    args = str(config.get("model_args") or "")
    match = _STEP.search(args) or _STEP.search(model)
    if match is None:
        return None, model
    series = _STEP.sub("", model) if _STEP.search(model) else model
    return int(match.group(1)), series.rstrip("/-_@") or model


def load_run(file: Path, label: str | None = None) -> Run:
    results = read_results(file)
    samples: dict[str, list[dict[str, Any]]] = {}
    for task in results["results"]:
        path = samples_path(file, task)
        if path.is_file():
            samples[task] = read_samples(path)
    step, series = step_of(results)
    model = str(results.get("model_name") or results.get("config", {}).get("model") or "model")
    engine = "jaxeval" if "jaxeval_version" in results else "lm-eval"
    if label is None:
        (label,) = base_names([results], [step])
    return Run(label, file, results, samples, engine, model, step, series)


def load_runs(paths: list[str], labels: list[str] | None = None) -> list[Run]:
    """Every run the paths name, labelled (`labels` in order, else short unique labels from the
    model and the settings that differ: jaxeval/report/labels.py)."""
    files = [f for p in paths for f in find_results_files(Path(p))]
    files = list(dict.fromkeys(files))
    if labels and len(labels) != len(files):
        raise JaxevalError(
            f"{len(labels)} --label values for {len(files)} runs "
            f"({', '.join(str(f) for f in files)})",
            field="label",
            hint="give one --label per results file, in the order listed",
        )
    runs = [load_run(f, labels[i] if labels else None) for i, f in enumerate(files)]
    if labels:
        return runs
    new = run_labels(
        [r.results for r in runs],
        [r.step for r in runs],
        [r.engine for r in runs],
        [r.date for r in runs],
    )
    return [dataclasses.replace(r, label=label) for r, label in zip(runs, new)]
