"""Groups: named collections of tasks and subgroups whose scores aggregate over all leaf tasks.

mmlu -> {mmlu_stem -> [mmlu_anatomy (135 docs), ...], mmlu_other -> [...], ...}
acc(mmlu) = sum_i acc_i * n_i / sum_i n_i over every leaf task i (weight_by_size, the default);
stderr    = pooled_sample_stderr(stderr_i, n_i) when every leaf has a numeric stderr, else "N/A".
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from jaxeval.api.config import AggMetricConfig, GroupConfig
from jaxeval.metrics import aggregate_subtask_metrics, pooled_sample_stderr

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Group:
    name: str
    alias: str | None = None
    aggregate_metric_list: list[AggMetricConfig] | None = None
    metadata: dict | None = None
    config: GroupConfig | None = None
    children: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, config: GroupConfig) -> Group:
        return cls(
            name=config.group,
            alias=config.group_alias,
            aggregate_metric_list=config.aggregate_metric_list,
            metadata=config.metadata,
            config=config,
        )

    def add(self, item: Any) -> None:
        self.children[item.name] = item

    @property
    def child_names(self) -> list[str]:
        return list(self.children)

    def all_tasks(self) -> list[Any]:
        out = []
        for child in self.children.values():
            out.extend(child.all_tasks() if isinstance(child, Group) else [child])
        return out

    def all_groups(self, recursive: bool = True) -> list[Group]:
        out = []
        for child in self.children.values():
            if isinstance(child, Group):
                out.append(child)
                if recursive:
                    out.extend(child.all_groups())
        return out

    @property
    def version(self) -> str:
        return "N/A" if not self.metadata else str(self.metadata.get("version", "N/A"))

    @property
    def has_aggregation(self) -> bool:
        return bool(self.aggregate_metric_list)

    def _discover_filters(self, metric: str, task_metrics: dict[str, dict]) -> list[str]:
        found = set()
        for task in self.all_tasks():
            for key in task_metrics.get(task.name, {}):
                if key.startswith(f"{metric},") and "_stderr" not in key:
                    found.add(key[len(metric) + 1 :])
        return sorted(found)

    def aggregate(self, task_metrics: dict[str, dict]) -> dict[str, Any]:
        out: dict[str, Any] = {"alias": self.alias or self.name, "name": self.name}
        if not self.aggregate_metric_list:
            return out
        leaves = [t.name for t in self.all_tasks()]
        out["sample_len"] = sum(
            task_metrics[n].get("sample_len", 0) for n in leaves if n in task_metrics
        )
        sample_count: dict[str, int] = {}
        for agg in self.aggregate_metric_list:
            filters = (
                agg.filter_list
                if agg.filter_list is not None
                else self._discover_filters(agg.metric, task_metrics)
            )
            for flt in filters:
                key, se_key = f"{agg.metric},{flt}", f"{agg.metric}_stderr,{flt}"
                values, stderrs, sizes = [], [], []
                for name in leaves:
                    res = task_metrics.get(name, {})
                    if key in res:
                        values.append(res[key])
                        sizes.append(res.get("sample_len", 0))
                        if res.get(se_key) is not None:
                            stderrs.append(res[se_key])
                if not values:
                    log.warning("group %s: no task reports %s", self.name, key)
                    continue
                # lm-eval aggregates groups with the (weighted) mean whatever `aggregation` says.
                out[key] = aggregate_subtask_metrics(values, sizes, agg.weight_by_size)
                sample_count[key] = sum(sizes)
                if len(stderrs) == len(values) and "N/A" not in stderrs:
                    if agg.weight_by_size:
                        out[se_key] = pooled_sample_stderr(stderrs, sizes)
                    else:
                        out[se_key] = float(np.sqrt(sum(s**2 for s in stderrs)) / len(stderrs))
                else:
                    out[se_key] = "N/A"
        if sample_count:
            out["sample_count"] = sample_count
        return out
