"""The scorers read a task only through `scoring.ScoredTask`: `Task` is one, and a plain stand-in
(no documents, no templates) is scored the same way. Golden case: the module docstring's example."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxeval.api import scoring
from jaxeval.api.config import TaskConfig
from jaxeval.api.task import Task

CHOICES = ["a", "bb", "c"]
RESULTS = [(-4.1, False), (-2.0, False), (-3.3, False)]  # choice 1 wins, raw and per character
DOCS = [{"question": "q", "choices": CHOICES, "label": 1}]


def multiple_choice_config() -> TaskConfig:
    return TaskConfig(
        task="scored",
        custom_dataset=lambda: {"test": DOCS},
        test_split="test",
        output_type="multiple_choice",
        doc_to_text="{{question}}",
        doc_to_choice="choices",
        doc_to_target="label",
        metric_list=[{"metric": "acc"}, {"metric": "acc_norm"}],
    )


@dataclasses.dataclass(frozen=True)
class StandIn:
    """A `ScoredTask` that is not a `Task`: one fixed target and choice list."""

    config: TaskConfig
    metric_table: scoring.MetricTable
    target: Any
    choices: list[str]
    multiple_target: int = 0

    def doc_to_target(self, doc: dict, *, doc_index: int | None = None) -> Any:
        return self.target

    def doc_to_choice(self, doc: dict, *, doc_index: int | None = None) -> list[str]:
        return self.choices

    def gold_index(self, doc: dict, choices: list[str], doc_index: int | None = None) -> int:
        return self.target


def test_a_task_is_a_scored_task():
    task = Task(multiple_choice_config())
    assert isinstance(task, scoring.ScoredTask)
    assert task.process_results(DOCS[0], RESULTS, doc_index=0) == {"acc": 1.0, "acc_norm": 1.0}


def test_a_stand_in_scores_like_the_task():
    config = multiple_choice_config()
    stand_in = StandIn(config, scoring.resolve_metrics(config), target=1, choices=CHOICES)
    assert isinstance(stand_in, scoring.ScoredTask)
    scores = scoring.OUTPUT_SCORERS["multiple_choice"](stand_in, {}, RESULTS, None)
    assert scores == {"acc": 1.0, "acc_norm": 1.0}
    assert scores == Task(config).process_results(DOCS[0], RESULTS, doc_index=0)


def test_generation_reads_the_metric_table():
    config = TaskConfig(task="gen", metric_list=[{"metric": "exact_match", "ignore_case": True}])
    table = scoring.resolve_metrics(config)
    stand_in = StandIn(config, table, target="Paris", choices=[])
    score = scoring.OUTPUT_SCORERS["generate_until"]
    assert score(stand_in, {}, ["paris"], None) == {"exact_match": 1.0}
    plain = dataclasses.replace(
        stand_in,
        metric_table=scoring.resolve_metrics(
            TaskConfig(task="gen", metric_list=[{"metric": "exact_match"}])
        ),
    )
    assert score(plain, {}, ["paris"], None) == {"exact_match": 0.0}


def test_a_rendering_is_kept_only_for_the_same_document():
    config = dataclasses.replace(
        multiple_choice_config(), doc_to_choice="{{choices}}", doc_to_target="{{label}}"
    )
    task = Task(config)
    doc = task.eval_docs[0]
    assert task.doc_to_choice(doc, doc_index=0) == doc["choices"]
    assert task.doc_to_choice(doc, doc_index=0) == doc["choices"]  # served from the kept text
    other = {**doc, "choices": ["elsewhere", "nowhere"], "label": 0}  # same index, another object
    assert task.doc_to_choice(other, doc_index=0) == ["elsewhere", "nowhere"]
    assert task.doc_to_target(doc, doc_index=0) == 1 and task.doc_to_target(other, doc_index=0) == 0
    assert task.doc_to_choice(other) == ["elsewhere", "nowhere"]  # a few-shot document: no index
