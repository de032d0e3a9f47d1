"""`Instance`: one request to the model, as lm-eval defines it (same fields, same meaning).

The three model request types are `loglikelihood`, `loglikelihood_rolling` and `generate_until`;
`multiple_choice` is a task output type that fans out into N `loglikelihood` instances.

    Instance("loglikelihood", doc, ("Question: 2+2?\\nAnswer:", " 4"), idx=1,
             metadata=("arc_easy", 7, 1))
    -> after the model runs: resps == [(-3.21, False)]; after filters: filtered_resps["none"] == (-3.21, False)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

OutputType = Literal["loglikelihood", "loglikelihood_rolling", "generate_until", "multiple_choice"]
REQUEST_TYPES: tuple[str, ...] = ("loglikelihood", "loglikelihood_rolling", "generate_until")
OUTPUT_TYPES: tuple[str, ...] = REQUEST_TYPES + ("multiple_choice",)


@dataclasses.dataclass
class Instance:
    """One request. Mutable on purpose: the evaluator appends to `resps`, filters fill `filtered_resps`."""

    request_type: str
    doc: dict
    arguments: tuple
    idx: int
    metadata: tuple[str | None, int | None, int | None] = (None, None, None)
    resps: list = dataclasses.field(default_factory=list)
    filtered_resps: dict = dataclasses.field(default_factory=dict)
    task_name: str | None = None
    doc_id: int | None = None
    repeats: int | None = None

    def __post_init__(self) -> None:
        if self.request_type not in REQUEST_TYPES:
            raise ValueError(f"unknown request type {self.request_type!r}; one of {REQUEST_TYPES}")
        self.task_name, self.doc_id, self.repeats = self.metadata

    @property
    def args(self) -> tuple[Any, ...]:
        return self.arguments if isinstance(self.arguments, tuple) else (self.arguments,)
