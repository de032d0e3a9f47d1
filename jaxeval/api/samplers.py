"""Few-shot samplers that pick the same documents, in the same order, as lm-eval.

One `random.Random(seed)` per task, consumed doc after doc in evaluation order (seed 1234 by default):

    s = RandomSampler(pool, seed=1234)
    s.sample(2, eval_doc=doc0)  -> rnd.sample(pool, 3) with doc0 removed, first 2 kept
    s.sample(2, eval_doc=doc1)  -> the next draw from the same stream

`first_n` takes the pool's first n documents (the evaluated one removed), as MMLU does with `dev`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.registry import Registry


class RandomSampler:
    """lm-eval's `ContextSampler` (`sampler: default`)."""

    def __init__(
        self,
        docs: Sequence[dict],
        *,
        seed: int | None = None,
        fewshot_indices: list[int] | None = None,
        task: str | None = None,
    ):
        pool = list(docs)
        if fewshot_indices:
            pool = [pool[i] for i in fewshot_indices]
        self.pool = pool
        self.task = task
        self.rnd = random.Random(seed)

    def set_seed(self, seed: int | None) -> None:
        self.rnd = random.Random(seed)

    def _check(self, n: int) -> None:
        if n > 0 and not self.pool:
            raise JaxevalError(
                "num_fewshot > 0 but the few-shot pool is empty",
                task=self.task,
                field="fewshot_split",
                hint="set fewshot_split or training_split",
            )
        if n > len(self.pool):
            raise JaxevalError(
                f"asked for {n} few-shot examples but the pool has only {len(self.pool)}",
                task=self.task,
                field="num_fewshot",
                hint="lower --num_fewshot",
            )

    def sample(self, n: int, eval_doc: dict | None = None) -> list[dict]:
        if n == 0:
            return []
        self._check(n)
        if not eval_doc:
            return self.rnd.sample(self.pool, n)
        drawn = self.rnd.sample(self.pool, min(n + 1, len(self.pool)))
        res = [d for d in drawn if d != eval_doc][:n]
        if len(res) < n:
            res = self.rnd.sample([d for d in self.pool if d != eval_doc], n)
        return res


class FirstNSampler(RandomSampler):
    """`sampler: first_n`: the first n documents of the pool, the evaluated document removed."""

    def sample(self, n: int, eval_doc: dict | None = None) -> list[dict]:
        pool = [d for d in self.pool if d != eval_doc] if eval_doc is not None else self.pool
        if n > len(pool):
            raise JaxevalError(
                f"asked for {n} few-shot examples but the pool has only {len(pool)}",
                task=self.task,
                field="num_fewshot",
                hint="lower --num_fewshot",
            )
        return list(pool[:n])


SAMPLERS: Registry[type[RandomSampler]] = Registry("few-shot sampler")
SAMPLERS.add("default", RandomSampler)
SAMPLERS.add("first_n", FirstNSampler)


def make_sampler(name: Any, docs: Sequence[dict], **kwargs: Any) -> RandomSampler:
    cls = name if isinstance(name, type) else SAMPLERS.get(name)
    return cls(docs, **kwargs)
