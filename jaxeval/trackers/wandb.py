"""`--wandb_args` / `--wandb_config_args`: the run's results in Weights & Biases, as lm-eval logs them.

    jaxeval run ... --wandb_args project=evals,name=llama-1b,step=1000 --wandb_config_args lr=3e-4

What one run logs (lm-eval 0.4.13's `WandbLogger`, same names):

    wandb.init(**wandb_args)         before the model loads; `step` is taken out and used for
                                     every `log` below; config.update(wandb_config_args)
    config   task_configs, cli_configs            results["configs"], results["config"]
    log      "<task>/<metric>[,<filter>]": value   ",none" dropped: arc_easy/acc, arc_easy/acc_stderr
    summary  "<task>/<key>": text                  text values (alias, name, an "N/A" stderr)
    log      evaluation/eval_results               table: Tasks|Version|Filter|num_fewshot|Metric|
                                                   Value|Stderr (evaluation/group_eval_results too)
    artifact results (eval_results)                results.json
    with --log_samples, per task:
    log      <task>_eval_results                   table, one row per document and filter
    artifact <task> (samples_by_task)              <task>_eval_samples.json

Differences: jaxeval's results table leaves out lm-eval's `name` and `sample_len` rows, its sample
tables add a `filter` column, and a failure to log is a warning printed to the console (lm-eval
logs it at info level, unseen by default); the results file is written before anything is logged.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from typing import Any
from urllib.parse import urlparse

import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.results.files import handle_non_serializable

log = logging.getLogger(__name__)

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
PROBE_TIMEOUT_S = 3.0
RESULT_COLUMNS = ["Version", "Filter", "num_fewshot", "Metric", "Value", "Stderr"]
_PERPLEXITY_PARTS = {  # per-document (loglikelihood, count) metrics: the count's column name
    "word_perplexity": "words",
    "byte_perplexity": "bytes",
    "bits_per_byte": "bytes",
}


def load_wandb() -> Any:
    """The `wandb` module, or an error that says how to install it."""
    try:
        import wandb
    except ImportError:
        raise JaxevalError(
            "Weights & Biases logging needs the wandb package",
            field="wandb_args",
            hint='pip install "jaxeval[wandb]" (or pip install wandb)',
        ) from None
    return wandb


def wandb_metrics(results: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(summary, metrics): `"<task>/<key>"` with a trailing ",none" dropped; text values go to the
    summary, everything else to `log`.

    {"arc_easy": {"alias": "arc_easy", "acc,none": 0.5, "acc_stderr,none": "N/A"}}
    -> ({"arc_easy/alias": "arc_easy", "arc_easy/acc_stderr": "N/A"}, {"arc_easy/acc": 0.5})
    """
    summary: dict[str, str] = {}
    metrics: dict[str, Any] = {}
    for task, entry in results.get("results", {}).items():
        for key, value in entry.items():
            name = f"{task}/{re.sub(r',none$', '', key)}"
            (summary if isinstance(value, str) else metrics)[name] = value
    return summary, metrics


def results_table_rows(results: dict[str, Any], key: str = "results") -> list[list[Any]]:
    """The rows of lm-eval's W&B results table (a task's groups left out of the "results" table)."""
    groups = set(results.get("groups", {}))
    versions = results.get("versions", {})
    n_shot = results.get("n-shot", {})
    rows = []
    for name, entry in results.get(key, {}).items():
        if key != "groups" and name in groups:
            continue
        version = versions.get(name)
        version = None if version == "N/A" else version
        for metric_filter, value in entry.items():
            metric, _, flt = metric_filter.partition(",")
            if metric.endswith("_stderr") or metric in ("alias", "name", "sample_len"):
                continue
            stderr = entry.get(f"{metric}_stderr,{flt}")
            if stderr is None:
                shown = ""
            elif stderr == "N/A":
                shown = "N/A"
            else:
                shown = f"{stderr:.4f}"
            rows.append([name, version, flt, n_shot.get(name), metric, str(value), shown])
    return rows


def _argmax(values: list[Any]) -> int:
    return int(np.argmax([float(v) for v in values]))


def _predictions(sample: dict[str, Any], output_type: str) -> tuple[Any, Any]:
    """(raw, filtered) prediction of one sample, as lm-eval's sample table shows it."""
    resps, filtered = sample["resps"], sample["filtered_resps"]
    if output_type == "multiple_choice":
        return _argmax([r[0][0] for r in resps]), _argmax([f[0] for f in filtered])
    if output_type == "loglikelihood":

        def said(loglik: Any, greedy: Any) -> str:
            will = "be" if str(greedy) == "True" else "not be"
            return (
                f"log probability of continuation is {loglik} \n\n"
                f"continuation will {will} generated with greedy sampling"
            )

        return said(*resps[0][0]), said(*filtered[0])
    return resps[0][0], filtered[0]


def _arguments(sample: dict[str, Any]) -> list[list[Any]]:
    """A sample's request arguments as lists, in memory ([[ctx, cont], ...]) or as saved
    ({"gen_args_0": {"arg_0": ctx, "arg_1": cont}, ...})."""
    args = sample["arguments"]
    if isinstance(args, dict):
        return [list(a.values()) for a in args.values()]
    return [list(a) for a in args]


def sample_table_columns(
    samples: list[dict[str, Any]], config: dict[str, Any]
) -> dict[str, list[Any]]:
    """lm-eval's per-document table for one task: id, data, [choices], input_len, labels,
    output_type, raw_predictions, filtered_predictions, one column per metric (perplexities as
    `<metric>_loglikelihood` and `<metric>_words|_bytes`), and jaxeval's `filter`."""
    output_type = config.get("output_type", "generate_until")
    metric_names = samples[0].get("metrics") if samples else None
    if not metric_names:
        metric_names = [m["metric"] for m in config.get("metric_list", []) if "metric" in m]
    args = [_arguments(s) for s in samples]
    data = [a[0][0] for a in args]
    labels: list[Any] = [s["target"] for s in samples]
    if output_type == "loglikelihood":
        labels = [a[0][1] for a in args]
    columns: dict[str, list[Any]] = {"id": [s["doc_id"] for s in samples], "data": data}
    if output_type == "multiple_choice":
        columns["choices"] = ["\n".join(f"{i}. {c[1]}" for i, c in enumerate(a)) for a in args]
    predictions = [_predictions(s, output_type) for s in samples]
    columns.update(
        input_len=[len(d) for d in data],
        labels=labels,
        output_type=[output_type] * len(samples),
        raw_predictions=[p[0] for p in predictions],
        filtered_predictions=[p[1] for p in predictions],
    )
    for metric in metric_names:
        values = [s.get(metric) for s in samples]
        if metric in _PERPLEXITY_PARTS:
            columns[f"{metric}_loglikelihood"] = [v[0] for v in values]
            columns[f"{metric}_{_PERPLEXITY_PARTS[metric]}"] = [v[1] for v in values]
        else:
            columns[metric] = values
    columns["filter"] = [s.get("filter") for s in samples]
    return {k: [handle_value(v) for v in vs] for k, vs in columns.items()}


def handle_value(value: Any) -> Any:
    """numpy scalars as Python numbers; lists and tuples as text (a table cell holds one value)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=handle_non_serializable, ensure_ascii=False)
    return value


def _check_reachable(init_args: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> None:
    """One TCP connection to the W&B server (`WANDB_BASE_URL`, else api.wandb.ai:443) before an
    online `wandb.init`, which otherwise waits out its `init_timeout` (90 s) on a host without a
    network; an unreachable server is a `JaxevalError`. Nothing is probed offline
    (`WANDB_MODE`/`mode` offline or disabled) or behind a proxy (the direct connection says nothing
    about the proxy's)."""
    mode = str(init_args.get("mode") or os.environ.get("WANDB_MODE") or "online").lower()
    if mode in ("offline", "disabled", "dryrun") or any(v in os.environ for v in PROXY_VARS):
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = url.hostname or "api.wandb.ai"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise JaxevalError(
            f"the W&B server ({host}:{port}) cannot be reached ({e.strerror or type(e).__name__})",
            field="wandb_args",
            hint="check the network (or WANDB_BASE_URL), or set WANDB_MODE=offline and upload "
            "later with `wandb sync`",
        ) from None


class WandbTracker:
    """One evaluation run's W&B logging (module docstring). Attaches to an active run if any."""

    def __init__(self, init_args: dict[str, Any], config_args: dict[str, Any]):
        wandb = load_wandb()
        init_args = dict(init_args)
        self.step = init_args.pop("step", None)
        if wandb.run is not None:
            self.run = wandb.run
            return
        _check_reachable(init_args)
        try:
            self.run = wandb.init(**init_args)
        except Exception as e:  # wandb raises its own types, TypeError for an unknown key
            raise JaxevalError(
                f"wandb.init({', '.join(f'{k}=...' for k in init_args)}) failed: {e}",
                field="wandb_args",
                hint="check the keys (wandb.init's arguments), log in with `wandb login`, or "
                "set WANDB_MODE=offline and upload later with `wandb sync`",
            ) from None
        if config_args:
            self.run.config.update(config_args)

    def log_results(self, results: dict[str, Any]) -> None:
        """Config, metrics, summary, results tables and the results.json artifact."""
        wandb = load_wandb()
        results = {k: v for k, v in results.items() if k != "samples"}
        configs = {
            "task_configs": results.get("configs", {}),
            "cli_configs": results.get("config", {}),
        }
        configs = json.loads(json.dumps(configs, default=handle_non_serializable))
        self.run.config.update(configs, allow_val_change=self.step is not None)
        summary, metrics = wandb_metrics(results)
        self.run.summary.update(summary)
        self.run.log(metrics, step=self.step)
        for key, head in (("results", "Tasks"), ("groups", "Groups")):
            if key not in results:
                continue
            table = wandb.Table(columns=[head, *RESULT_COLUMNS])
            for row in results_table_rows(results, key):
                table.add_data(*row)
            name = "eval_results" if key == "results" else "group_eval_results"
            self.run.log({f"evaluation/{name}": table}, step=self.step)
        self._artifact("results", "eval_results", "results.json", results)

    def log_samples(self, results: dict[str, Any], samples: dict[str, list[dict]]) -> None:
        """One table per task (`<task>_eval_results`), or per `group` a task config names, and one
        artifact per task."""
        wandb = load_wandb()
        configs = results.get("configs", {})
        groups = set(results.get("groups", {}))
        by_group: dict[str, list[str]] = {}
        for task in results.get("results", {}):
            if task in groups or task not in samples:
                continue
            named = configs.get(task, {}).get("group")
            for group in [named] if isinstance(named, str) else named or [None]:
                by_group.setdefault(group, []).append(task)
        for group, tasks in by_group.items():
            for task in tasks:
                self._artifact(task, "samples_by_task", f"{task}_eval_samples.json", samples[task])
            if group is None:
                for task in tasks:
                    table = _table(wandb, [sample_table_columns(samples[task], configs[task])])
                    self.run.log({f"{task}_eval_results": table}, step=self.step)
                continue
            parts = []
            for task in tasks:
                cols = sample_table_columns(samples[task], configs[task])
                n = len(cols["id"])
                parts.append({**cols, "group": [group] * n, "task": [task] * n})
            self.run.log({f"{group}_eval_results": _table(wandb, parts)}, step=self.step)

    def _artifact(self, name: str, kind: str, file: str, data: Any) -> None:
        wandb = load_wandb()
        artifact = wandb.Artifact(name, type=kind)
        with artifact.new_file(file, mode="w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, default=handle_non_serializable, ensure_ascii=False)
        self.run.log_artifact(artifact)

    def finish(self) -> None:
        self.run.finish()


def _table(wandb: Any, parts: list[dict[str, list[Any]]]) -> Any:
    """One table from column dicts that may name different columns (None where one has none)."""
    names = list(dict.fromkeys(name for cols in parts for name in cols))
    rows = []
    for cols in parts:
        n = len(cols["id"])
        rows += [[cols[k][i] if k in cols else None for k in names] for i in range(n)]
    return wandb.Table(columns=names, data=rows)
