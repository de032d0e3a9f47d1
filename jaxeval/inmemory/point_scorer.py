"""`PointScorer`: the `Scorer` of models without a [V, D] head matrix.

The usual kernel (`jaxeval.kernels.score.score`) streams `head_weight` over vocabulary chunks. A
model that only offers `head(params, h)` or `logits(...)` (`FunctionModel`) cannot be chunked, so
`PointScorer` lowers `jaxeval.kernels.score.score_points` for it (its logits at the score points,
reduced with the same float32 expressions and first-index tie rule) and the usual kernel
otherwise; batches, shardings, compile-once-per-shape and the exactly-once check are the
`Scorer`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from jaxeval.kernels.score import score_points
from jaxeval.lm.score.buckets import Bucket
from jaxeval.lm.score.scorer import Scorer


class PointScorer(Scorer):
    """A `Scorer` whose kernel is `score_points` for models without `has_head_weight` (the same
    sharding boundary, executables and counters: `Scorer.job`)."""

    def kernel(self, bucket: Bucket) -> Callable:
        if getattr(self.model, "has_head_weight", True):
            return super().kernel(bucket)
        return functools.partial(
            score_points, model=self.model, runtime=self.runtime, n_slots=bucket.slots
        )
