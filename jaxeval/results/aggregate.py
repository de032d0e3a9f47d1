"""From per-document metric values to the results dict, in lm-eval's schema.

    raw_metrics[("acc", "none")] = [1.0, 0.0, 1.0]
    -> results["arc_easy"] = {"name": "arc_easy", "alias": "arc_easy", "sample_len": 3,
                              "acc,none": 0.6667, "acc_stderr,none": 0.3333}
Groups are aggregated children-first over their leaf tasks (see `jaxeval.api.group`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from jaxeval.api.group import Group
from jaxeval.api.scoring import MetricTable
from jaxeval.api.task import Task
from jaxeval.metrics import AGGREGATIONS, stderr_for_aggregation
from jaxeval.platform import phases

log = logging.getLogger(__name__)


@dataclasses.dataclass
class TaskAccumulator:
    """One task's per-document metric values (`raw_metrics[(metric, filter)]`), logged samples, and
    the sub-metrics its dict-valued metrics produced (`derived`: sub-metric -> parent metric)."""

    task: Task
    raw_metrics: dict[tuple[str, str], list[Any]] = dataclasses.field(default_factory=dict)
    samples: list[dict] = dataclasses.field(default_factory=list)
    derived: dict[str, str] = dataclasses.field(default_factory=dict)

    def metric_table(self) -> MetricTable:
        """The task's aggregations and directions, its sub-metrics included (functions left out:
        an lm-eval `class:` task exposes only these two)."""
        table = MetricTable(
            fns={},
            kwargs={},
            aggregations=self.task.aggregations,
            higher_is_better=self.task.higher_is_better,
        )
        return table.with_derived(self.derived)


def task_aggregates(
    acc: TaskAccumulator, bootstrap_iters: int | None
) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    sample_len = 0
    aggregations = acc.metric_table().aggregations
    for (metric, flt), items in acc.raw_metrics.items():
        agg_fn = aggregations.get(metric)
        if agg_fn is None:
            log.warning("[%s] no aggregation for metric %s; using mean", acc.task.name, metric)
            agg_fn = AGGREGATIONS.get("mean")
        out[f"{metric},{flt}"] = agg_fn(items)
        sample_len = max(sample_len, len(items))
        stderr = "N/A"
        if isinstance(bootstrap_iters, int) and bootstrap_iters > 0:
            se_fn = stderr_for_aggregation(agg_fn, bootstrap_iters, metric_name=metric)
            if se_fn is not None and len(items) > 1:
                with phases.phase("stderr"):
                    stderr = se_fn(items)
        out[f"{metric}_stderr,{flt}"] = stderr
    return out, sample_len


def _groups_bottom_up(groups: dict[str, Group]) -> list[Group]:
    children = {g.name for grp in groups.values() for g in grp.all_groups(recursive=False)}
    order: list[Group] = []
    seen: set[str] = set()

    def visit(group: Group) -> None:
        if group.name in seen:
            return
        for child in group.children.values():
            if isinstance(child, Group):
                visit(child)
        seen.add(group.name)
        order.append(group)

    for name, group in groups.items():
        if name not in children:
            visit(group)
    return order


def build_results(
    accs: dict[str, TaskAccumulator],
    groups: dict[str, Group],
    bootstrap_iters: int | None,
    *,
    log_samples: bool,
) -> dict[str, Any]:
    metrics: dict[str, dict] = {}
    configs, versions, n_shot, hib, n_samples, samples = {}, {}, {}, {}, {}, {}
    for name, acc in accs.items():
        agg, sample_len = task_aggregates(acc, bootstrap_iters)
        cfg = acc.task.dump_config()
        metrics[name] = {
            "name": name,
            "alias": cfg.get("task_alias", name),
            "sample_len": sample_len,
            **agg,
        }
        configs[name] = cfg
        versions[name] = acc.task.version
        n_shot[name] = cfg.get("num_fewshot", 0)
        hib[name] = dict(acc.metric_table().higher_is_better)
        samples[name] = acc.samples
        n_samples[name] = {"original": len(acc.task.eval_docs), "effective": sample_len}
    for group in _groups_bottom_up(groups):
        metrics[group.name] = group.aggregate(metrics)
        versions[group.name] = group.version
    all_groups = list(groups.values())
    for group in all_groups:
        shots = {n_shot[c] for c in group.child_names if c in n_shot}
        if len(shots) == 1:
            n_shot[group.name] = shots.pop()
    for group in all_groups:
        merged: dict[str, Any] = {}
        for child in group.child_names:
            for m, h in hib.get(child, {}).items():
                if m not in merged:
                    merged[m] = h
                elif merged[m] is not None and merged[m] != h:
                    merged[m] = None
        if merged:
            hib[group.name] = merged
    results: dict[str, Any] = {"results": {k: dict(v) for k, v in metrics.items()}}
    group_results = {
        k: dict(v) for k, v in metrics.items() if k in groups and groups[k].has_aggregation
    }
    if group_results:
        results["groups"] = group_results
    results.update(
        {
            "group_subtasks": {g.name: g.child_names for g in all_groups},
            "configs": dict(sorted(configs.items())),
            "versions": dict(sorted(versions.items())),
            "n-shot": dict(sorted(n_shot.items())),
            "higher_is_better": dict(sorted(hib.items())),
            "n-samples": n_samples,
        }
    )
    if log_samples:
        results["samples"] = samples
    return results
