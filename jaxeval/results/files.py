"""Results on disk and on screen: lm-eval's file names and schema, written atomically; the table.

    --output_path out/            -> out/<model_sanitized>/results_<date>.json
                                     out/<model_sanitized>/samples_<task>_<date>.jsonl
    --output_path out/run.json    -> out/run_<date>.json (+ samples next to it)

Every file is written to a temporary name in the same folder and renamed into place, samples first,
results last, so an interrupted run never leaves a half-written or misleading results file; files
get the mode the umask gives (0644 under umask 022), as lm-eval's do. A journal names the files of
a save in progress, so the next save to that folder removes what a killed one left (hidden
temporaries, samples files without their results file: `jaxeval.results.journal`). A save that
fails (a full disk, a file where the folder goes) keeps the results in a `jaxeval-unsaved-<date>`
folder of the temporary directory (else the current one, else stdout) and raises a JaxevalError
naming it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.lm.args import parse_model_args
from jaxeval.paths import current_umask
from jaxeval.results import journal

HIGHER_IS_BETTER_SYMBOLS = {True: "↑", False: "↓"}
_MODEL_NAME_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")


def handle_non_serializable(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, set):
        return list(obj)
    return str(obj)


def sanitize_list(value: Any) -> Any:
    """Nested lists/tuples of responses -> lists of strings (what lm-eval writes to samples)."""
    if isinstance(value, (list, tuple)):
        return [sanitize_list(v) for v in value]
    return str(value)


def _sha(text: str | None) -> str | None:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text else None


def model_name(model_args: Any) -> str:
    args = parse_model_args(model_args) if not isinstance(model_args, dict) else model_args
    for key in _MODEL_NAME_KEYS:
        if args.get(key):
            return str(args[key])
    return ""


def sanitize_model_name(name: str) -> str:
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)


def atomic_write(path: Path, text: str) -> None:
    """Writes `text` to `path` through a hidden temporary file in the same folder, renamed into
    place: a reader sees the old file or the whole new one. The file gets the mode a plain
    `open(path, "w")` would give it, 0o666 less the umask (0644 under umask 022), as lm-eval's
    files have; the temporary is made 0600 and widened before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _sample_line(sample: dict) -> str:
    sample = dict(sample)
    sample["arguments"] = {
        f"gen_args_{i}": {f"arg_{j}": a for j, a in enumerate(args)}
        for i, args in enumerate(sample["arguments"])
    }
    sample["resps"] = sanitize_list(sample["resps"])
    sample["filtered_resps"] = sanitize_list(sample["filtered_resps"])
    sample["target"] = str(sample["target"])
    return json.dumps(sample, default=handle_non_serializable, ensure_ascii=False)


def save_results(
    results: dict,
    output_path: str,
    *,
    model_args: Any,
    model_source: str,
    system_instruction: str | None = None,
    fewshot_as_multiturn: bool | None = None,
    chat_template: str | None = None,
    start_time: float | None = None,
    finish: Callable[[dict], None] | None = None,
) -> Path:
    """Writes samples jsonl files (if present in `results`) and the results JSON; returns its path.
    `finish(results)`, when given, runs after the samples files are written and before the results
    JSON is made (the run's `timing` block is completed there)."""
    results = dict(results)
    samples = results.pop("samples", None) or {}
    name = model_name(model_args)
    results["task_hashes"] = {
        task: hashlib.sha256(
            "".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in rows).encode(
                "utf-8"
            )
        ).hexdigest()
        for task, rows in samples.items()
    }
    results.update(
        {
            "model_source": model_source,
            "model_name": name,
            "model_name_sanitized": sanitize_model_name(name),
            "system_instruction": system_instruction,
            "system_instruction_sha": _sha(system_instruction),
            "fewshot_as_multiturn": fewshot_as_multiturn,
            "chat_template": chat_template,
            "chat_template_sha": _sha(chat_template),
            "total_evaluation_time_seconds": None
            if start_time is None
            else str(datetime.datetime.now().timestamp() - start_time),
        }
    )
    date_id = datetime.datetime.now().isoformat().replace(":", "-")
    path = Path(output_path)
    if path.suffix == ".json":
        results_file = path.with_name(f"{path.stem}_{date_id}.json")
    else:
        results_file = path / sanitize_model_name(name) / f"results_{date_id}.json"
    files = {samples_path(results_file, task): rows for task, rows in samples.items()}
    made: list[str] = []

    def text() -> str:
        if not made:
            if finish is not None:
                finish(results)
            made.append(
                json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False)
            )
        return made[0]

    try:
        write_results(results_file, text, files)
    except OSError as e:
        raise save_failed(e, results_file, text(), files) from None
    return results_file


def write_results(
    results_file: Path, text: str | Callable[[], str], samples: dict[Path, list[dict]]
) -> None:
    """The samples files, then the results file (`text`, or `text()` made after the samples are
    written), each atomically, under a journal (`jaxeval.results.journal`) after sweeping what
    killed saves left in the folder."""
    folder = results_file.parent
    folder.mkdir(parents=True, exist_ok=True)
    journal.sweep(folder)
    with journal.journal(folder, [p.name for p in samples] + [results_file.name]):
        for path, rows in samples.items():
            atomic_write(path, "".join(_sample_line(r) + "\n" for r in rows))
        atomic_write(results_file, text if isinstance(text, str) else text())


def save_failed(
    error: OSError, results_file: Path, text: str, samples: dict[Path, list[dict]]
) -> JaxevalError:
    """The error of a save that failed, after the results were kept elsewhere: the same file
    names in a folder `jaxeval-unsaved-<date>` of the temporary directory, else of the current
    one; when neither takes the results file, its JSON goes to stdout."""
    kept = None
    for base in (tempfile.gettempdir(), os.getcwd()):
        folder = Path(base) / f"jaxeval-unsaved-{date_id_of(results_file.name)}"
        try:
            atomic_write(folder / results_file.name, text)
        except OSError:
            continue
        kept = folder
        break
    lost = []
    for path, rows in samples.items():
        try:
            if kept is None:
                raise OSError
            atomic_write(kept / path.name, "".join(_sample_line(r) + "\n" for r in rows))
        except OSError:
            lost.append(path.name)
    if kept is None:
        print(text)
        where = "standard output (above)"
    else:
        where = str(kept / results_file.name)
    reason = error.strerror or str(error)
    return JaxevalError(
        f"the results could not be saved ({reason}); they were written to {where} instead"
        + (f"; not saved: {', '.join(lost)}" if lost else ""),
        file=str(error.filename or results_file),
        field="output_path",
        hint="free space or fix the output folder, then move the saved files into it (the table "
        "above shows the scores)",
    )


def date_id_of(file_name: str) -> str:
    """The run's date in a results or samples file name: after the last "_", before the suffix.

    results_2024-05-01T10-00-00.5.json, samples_arc_easy_2024-05-01T10-00-00.5.jsonl
    -> 2024-05-01T10-00-00.5 (the date never holds a "_")
    """
    return file_name.rsplit("_", 1)[-1].removesuffix(".jsonl").removesuffix(".json")


def samples_path(results_file: Path, task: str) -> Path:
    """The samples file of `task` beside a results file (same date).

    out/m/results_2024-05-01T10-00-00.5.json, arc_easy -> out/m/samples_arc_easy_2024-05-01T10-00-00.5.jsonl
    """
    return results_file.parent / f"samples_{task}_{date_id_of(results_file.name)}.jsonl"


def table_order(
    group_subtasks: dict[str, list[str]], keys: set[str]
) -> tuple[dict[str, int], list[str]]:
    """(depth, order) of the table's rows: each group, then its children one level deeper;
    then the tasks under no group, sorted.

    {"mmlu": ["mmlu_stem"], "mmlu_stem": ["mmlu_anatomy"]}, {"mmlu", "mmlu_anatomy", "arc_easy"}
    -> depth {"mmlu": 0, "mmlu_stem": 1, "mmlu_anatomy": 2}, order ["mmlu", "mmlu_anatomy", "arc_easy"]
    """
    depth: dict[str, int] = {}
    order: list[str] = []

    def visit(name: str, d: int) -> None:
        depth[name] = d
        if name in keys:
            order.append(name)
        for child in sorted(group_subtasks.get(name, [])):
            visit(child, d + 1)

    children = {c for cs in group_subtasks.values() for c in cs}
    for name in sorted(group_subtasks):
        if name not in children:
            visit(name, 0)
    order += [k for k in sorted(keys) if k not in depth]
    return depth, order


def make_table(results: dict, column: str = "results") -> str:
    """The markdown table lm-eval prints: Tasks|Version|Filter|n-shot|Metric| |Value| |Stderr."""
    headers = [
        "Groups" if column == "groups" else "Tasks",
        "Version",
        "Filter",
        "n-shot",
        "Metric",
        "",
        "Value",
        "",
        "Stderr",
    ]
    rows: list[list[str]] = []
    depth, order = table_order(results.get("group_subtasks", {}), set(results[column]))
    for key in order:
        entry = dict(results[column][key])
        version = str(results["versions"].get(key, "    N/A"))
        shots = str(results.get("n-shot", {}).get(key, " "))
        hib = results.get("higher_is_better", {}).get(key, {})
        name = entry.pop("alias", key)
        for k in ("name", "sample_len", "sample_count"):
            entry.pop(k, None)
        if depth.get(key, 0) > 0:
            name = " " * depth[key] + "- " + name
        for mf, value in sorted(entry.items()):
            metric, _, flt = mf.partition(",")
            if metric.endswith("_stderr"):
                continue
            shown = f"{value:.4f}" if isinstance(value, float) else str(value)
            arrow = HIGHER_IS_BETTER_SYMBOLS.get(hib.get(metric), "")
            se_key = f"{metric}_stderr,{flt}"
            if se_key in entry:
                se = entry[se_key]
                rows.append(
                    [
                        name,
                        version,
                        flt,
                        shots,
                        metric,
                        arrow,
                        shown,
                        "±",
                        "   N/A" if se == "N/A" else f"{se:.4f}",
                    ]
                )
            else:
                rows.append([name, version, flt, shots, metric, arrow, shown, "", ""])
            name, version = "", ""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    right = {6, 8}

    def line(cells: list[str]) -> str:
        return (
            "|"
            + "|".join(
                (c.rjust(w) if i in right else c.ljust(w))
                for i, (c, w) in enumerate(zip(cells, widths))
            )
            + "|"
        )

    sep = (
        "|"
        + "|".join(("-" * (w - 1) + ":") if i in right else "-" * w for i, w in enumerate(widths))
        + "|"
    )
    return "\n".join([line(headers), sep, *(line(r) for r in rows)]) + "\n"
