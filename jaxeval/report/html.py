"""`jaxeval report`'s page: one self-contained HTML file (inline CSS, script and SVG).

Runs          label, engine, model, settings, date, step, tasks, samples, file (long paths
              wrap; the whole path on hover)
Results       lm-eval's table (Tasks|Version|Filter|n-shot|Metric|↑↓|Value ± Stderr), one
              Value ± Stderr column per run, the best value of a row in bold
Charts        per task, a bar chart per metric and filter: one bar per run, ±stderr whiskers;
              perplexities on a log axis
Curves        when runs are checkpoints of one training run (a step each): metric against step
A vs B        the baseline against each other run: paired tests and the documents that changed

Wide tables scroll inside their own box (`div.scroll`), so the page itself never gets wider than
the window.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import numbers
from html import escape
from pathlib import Path
from typing import Any

from jaxeval.report.assets import CSS, ERROR_HOOK, MAIN
from jaxeval.report.compare import PERPLEXITIES, Comparison, compare_runs, shared_tasks
from jaxeval.report.html_compare import comparison_html, scroll
from jaxeval.report.labels import model_path_of, settings_of, short_names
from jaxeval.report.load import Run
from jaxeval.report.svg import PALETTE, Bar, Line, bar_chart, line_chart
from jaxeval.results.files import HIGHER_IS_BETTER_SYMBOLS, atomic_write, table_order

_NOT_METRICS = ("alias", "name", "sample_len")


def _number(value: Any) -> float | None:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def metric_keys(runs: list[Run], column: str = "results") -> list[tuple[str, int, str, str]]:
    """(task, depth, metric, filter) rows of the results table, in lm-eval's order."""
    groups: dict[str, list[str]] = {}
    keys: set[str] = set()
    for run in runs:
        for group, children in run.results.get("group_subtasks", {}).items():
            groups.setdefault(group, [])
            groups[group] += [c for c in children if c not in groups[group]]
        keys |= set(run.results.get(column, {}))
    depth, order = table_order(groups, keys)
    rows = []
    for task in order:
        seen: dict[tuple[str, str], None] = {}
        for run in runs:
            for key in sorted(run.results.get(column, {}).get(task, {})):
                metric, _, flt = key.partition(",")
                if metric in _NOT_METRICS or metric.endswith("_stderr"):
                    continue
                seen[(metric, flt)] = None
        rows += [(task, depth.get(task, 0), m, f) for m, f in seen]
    return rows


def _value(run: Run, column: str, task: str, metric: str, flt: str) -> tuple[Any, Any]:
    entry = run.results.get(column, {}).get(task, {})
    return entry.get(f"{metric},{flt}"), entry.get(f"{metric}_stderr,{flt}")


def _direction(runs: list[Run], task: str, metric: str) -> bool | None:
    for run in runs:
        hib = run.results.get("higher_is_better", {}).get(task, {})
        if metric in hib:
            return bool(hib[metric])
    return None


def _first(runs: list[Run], field: str, task: str) -> str:
    values = list(dict.fromkeys(str(r.results.get(field, {}).get(task, "")) for r in runs))
    values = [v for v in values if v]
    return " / ".join(values)


def results_table(runs: list[Run], column: str = "results") -> str:
    head = "Groups" if column == "groups" else "Tasks"
    cells = "".join(f"<th class='run'>{breakable(r.label)}</th>" for r in runs)
    out = [
        f"<div class='scroll'><table class='results' data-column='{column}'><thead><tr>"
        f"<th>{head}</th><th>Version</th>"
        f"<th>Filter</th><th>n-shot</th><th>Metric</th><th></th>{cells}</tr></thead><tbody>"
    ]
    last = None
    for task, depth, metric, flt in metric_keys(runs, column):
        hib = _direction(runs, task, metric)
        values = [_value(r, column, task, metric, flt) for r in runs]
        numbers_ = [_number(v) for v, _ in values]
        present = [n for n in numbers_ if n is not None]
        best = None
        if hib is not None and len(present) > 1 and len(set(present)) > 1:
            best = max(present) if hib else min(present)
        name = ""
        if task != last:
            alias = next((r.results.get(column, {}).get(task, {}).get("alias") for r in runs), None)
            name = ("&nbsp;" * 2 * depth + "- " if depth else "") + escape(alias or task)
        row = [
            f"<td>{name}</td><td>{escape(_first(runs, 'versions', task)) if name else ''}</td>"
            f"<td>{escape(flt)}</td><td>{escape(_first(runs, 'n-shot', task))}</td>"
            f"<td>{escape(metric)}</td><td>{HIGHER_IS_BETTER_SYMBOLS.get(hib, '')}</td>"
        ]
        for (value, stderr), number in zip(values, numbers_):
            if value is None:
                row.append("<td class='num'></td>")
                continue
            cls = " best" if best is not None and number == best else ""
            shown = f"{number:.4f}" if number is not None else escape(str(value))
            se = _number(stderr)
            se_text = f"{se:.4f}" if se is not None else escape(str(stderr or ""))
            se_html = f" <span class='se'>± {se_text}</span>" if stderr is not None else ""
            row.append(f"<td class='num value{cls}'><span class='v'>{shown}</span>{se_html}</td>")
        out.append(f"<tr data-task='{escape(task)}'>{''.join(row)}</tr>")
        last = task
    out.append("</tbody></table></div>")
    return "".join(out)


def log_axis(metric: str) -> bool:
    """Perplexities are drawn on a log axis: one large value would flatten the others.
    bits_per_byte stays linear: it is a logarithm already (log2 of the byte perplexity)."""
    return metric in PERPLEXITIES


def _colors(runs: list[Run]) -> dict[str, str]:
    return {r.label: PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}


def legend(runs: list[Run]) -> str:
    colors = _colors(runs)
    spans = "".join(
        f"<span><i class='swatch' style='background:{colors[r.label]}'></i>{escape(r.label)}</span>"
        for r in runs
    )
    return f"<p class='legend'>{spans}</p>"


def charts(runs: list[Run]) -> str:
    colors = _colors(runs)
    out = [legend(runs)]
    by_task: dict[str, list[str]] = {}
    for task, _, metric, flt in metric_keys(runs):
        bars = []
        for run in runs:
            value, stderr = _value(run, "results", task, metric, flt)
            if _number(value) is not None:
                bars.append(Bar(run.label, float(value), _number(stderr), colors[run.label]))
        if bars:
            title = metric if flt in ("none", "") else f"{metric} ({flt})"
            by_task.setdefault(task, []).append(bar_chart(title, bars, log=log_axis(metric)))
    for task, svgs in by_task.items():
        out.append(
            f"<h3>{escape(task)}</h3><div class='charts' data-task='{escape(task)}'>"
            f"{''.join(svgs)}</div>"
        )
    return "".join(out)


def curves(runs: list[Run]) -> str:
    """Metric against step for each training run with three steps or more (two are the bar
    charts already); "" when there is none."""
    series: dict[str, list[Run]] = {}
    for run in runs:
        if run.step is not None:
            series.setdefault(run.series, []).append(run)
    series = {k: v for k, v in series.items() if len({r.step for r in v}) > 2}
    if not series:
        return ""
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    names = short_names(list(series))
    out = []
    for task, _, metric, flt in metric_keys([r for rs in series.values() for r in rs]):
        lines = []
        for name, members in series.items():
            points = []
            for run in members:
                value, stderr = _value(run, "results", task, metric, flt)
                if _number(value) is not None:
                    points.append((float(run.step), float(value), _number(stderr)))
            if points:
                lines.append(Line(names[name], colors[name], points))
        if any(len(line.points) > 2 for line in lines):
            title = f"{task} · {metric}" + ("" if flt in ("none", "") else f" ({flt})")
            out.append(line_chart(title, lines, log=log_axis(metric)))
    keys = "".join(
        f"<span title='{escape(n)}'><i class='swatch' style='background:{colors[n]}'></i>"
        f"{escape(names[n])}</span>"
        for n in series
    )
    return f"<p class='legend'>{keys}</p><div class='charts'>{''.join(out)}</div>"


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity after each "/", "_" and "·"."""
    out = escape(text)
    for mark in ("/", "_", "·"):
        out = out.replace(mark, mark + "<wbr>")
    return out


def _path_cell(text: str, shown: str, cls: str = "") -> str:
    """A table cell showing `shown`, the whole `text` on hover."""
    return f"<td class='{cls}' title='{escape(text)}'>{breakable(shown)}</td>"


def _date(date_id: str) -> str:
    """2025-06-01T09-30-00.000001 -> 2025-06-01 09:30:00."""
    day, _, time = date_id.partition("T")
    return f"{day} {time.split('.')[0].replace('-', ':')}" if time else date_id


def _file(path: str, folder_chars: int = 24) -> str:
    """A results file as results_<date>.json under the end of its folder's name."""
    folder, _, name = path.rpartition("/")
    folder = folder.rsplit("/", 1)[-1]
    if len(folder) > folder_chars:
        folder = "…" + folder[-folder_chars:]
    return f"{folder}/{name}" if folder else name


def _settings(run: Run) -> str:
    """n-shot, limit, model arguments but the model's name, chat template: what the run ran with."""
    texts = settings_of(run.results).values()
    return ", ".join(t for t in texts if t and t not in ("all documents", "no chat template"))


def runs_table(runs: list[Run]) -> str:
    colors = _colors(runs)
    paths = [model_path_of(r.results) for r in runs]
    models = short_names(paths)
    rows = []
    for run, path in zip(runs, paths):
        version = run.results.get("jaxeval_version") or run.results.get("lm_eval_version") or ""
        n_samples = sum(len(v) for v in run.samples.values())
        file = str(run.results_file)
        rows.append(
            f"<tr><td class='label'><i class='swatch' style='background:{colors[run.label]}'></i>"
            f"{breakable(run.label)}</td><td>{escape(run.engine)} {escape(str(version))}</td>"
            f"{_path_cell(path, models[path], 'path')}"
            f"<td class='settings'>{escape(_settings(run))}</td>"
            f"<td class='date' title='{escape(run.date)}'>{escape(_date(run.date))}</td>"
            f"<td class='num'>{'' if run.step is None else run.step}</td>"
            f"<td>{escape(', '.join(run.tasks))}</td><td class='num'>{n_samples}</td>"
            f"{_path_cell(file, _file(file), 'muted path file')}</tr>"
        )
    return scroll(
        "<table class='runs'><thead><tr><th>Run</th><th>Engine</th><th>Model</th>"
        "<th>Settings</th><th>Date</th><th>Step</th><th>Tasks</th><th>Samples</th>"
        "<th>File</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def render_report(
    runs: list[Run], *, title: str = "Evaluation report", baseline: int = 0, max_flips: int = 50
) -> str:
    """The whole page for `runs` (module docstring); compares `runs[baseline]` with the others."""
    shared = shared_tasks(runs)
    notes = []
    for run in runs:
        alone = [t for t in run.tasks if t not in shared]
        if len(runs) > 1 and alone:
            notes.append(f"only in {run.label}: {', '.join(alone)}")
    base = runs[baseline]
    comparisons: list[Comparison] = [compare_runs(base, r) for r in runs if r is not base]
    sections = [
        ("runs", "Runs", runs_table(runs)),
        ("results", "Results", results_table(runs)),
    ]
    if any("groups" in r.results for r in runs):
        sections.append(("groups", "Groups", results_table(runs, "groups")))
    sections.append(("charts", "Charts (± stderr)", charts(runs)))
    curve_html = curves(runs)
    if curve_html:
        sections.append(("curves", "Across training steps", curve_html))
    body = [f"<h2 id='{key}'>{name}</h2>{html}" for key, name, html in sections]
    body += [comparison_html(c, i, max_flips) for i, c in enumerate(comparisons)]
    nav = [f"<a href='#{key}'>{name}</a>" for key, name, _ in sections]
    nav += [
        f"<a href='#comparison-{i}'>A vs {escape(c.b.label)}</a>" for i, c in enumerate(comparisons)
    ]
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    note_html = "".join(f"<p class='note'>{escape(n)}</p>" for n in notes)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{CSS}</style><script>{ERROR_HOOK}</script></head>"
        f"<body><header><h1>{escape(title)}</h1><p class='muted'>{len(runs)} run(s), made by "
        f"jaxeval {_version()} on {now}. <span id='report-status'>the page script has not "
        "run</span></p><pre id='report-errors' hidden></pre>"
        f"<nav>{''.join(nav)}</nav>{note_html}</header>{''.join(body)}"
        f"<script>{MAIN}</script></body></html>"
    )


def _version() -> str:
    try:
        return importlib.metadata.version("jaxeval")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def write_report(runs: list[Run], out: str | Path, **options: Any) -> Path:
    """Writes `render_report(runs, **options)` to `out` (atomically); returns the path."""
    path = Path(out)
    atomic_write(path, render_report(runs, **options))
    return path
