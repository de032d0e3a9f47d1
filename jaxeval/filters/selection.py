"""Filters that pick among an instance's repeated responses (`repeats` > 1 in a task config).

Every filter takes `resps` (one list of responses per instance, R instances) and `docs` (R documents)
and returns R filtered values:

    resps = [["a", "b", "a"], ["c", "d", "d"]]
    take_first(resps, docs)           -> ["a", "c"]                   (unwraps the list)
    take_first_k(resps, docs, k=2)    -> [["a", "b"], ["c", "d"]]
    majority_vote(resps, docs)        -> [["a"], ["d"]]               (ties: the first seen wins)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from jaxeval.errors import JaxevalError


def take_first(resps: list[list[Any]], docs: list[dict]) -> list[Any]:
    """The first response of each instance."""
    return [r[0] for r in resps]


def take_first_k(resps: list[list[Any]], docs: list[dict], *, k: int) -> list[list[Any]]:
    """The first k responses of each instance; the first instance must have at least k."""
    resps = list(resps)
    if resps and len(resps[0]) < k:
        raise JaxevalError(
            f"take_first_k needs at least {k} responses per document, got {len(resps[0])}",
            hint=f"set the task's `repeats` to at least {k}",
        )
    return [r[:k] for r in resps]


def majority_vote(resps: list[list[Any]], docs: list[dict]) -> list[list[Any]]:
    """`[most common response]` per instance; among equally common ones, the first seen."""
    return [[Counter(r).most_common(1)[0][0]] for r in resps]
