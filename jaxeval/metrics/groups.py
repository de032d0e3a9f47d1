"""Group scores from subtask scores: size-weighted means and pooled standard errors (lm-eval 0.4.13).

For example:

    aggregate_subtask_metrics([0.5, 1.0], [2, 6])               -> (0.5·2 + 1.0·6) / 8 = 0.875
    aggregate_subtask_metrics([0.5, 1.0], [2, 6], weight_by_size=False)     -> 0.75
    pooled_sample_stderr([se1, se2], [n1, n2]) = sqrt(Σ (n_i - 1)·se_i²·n_i / (Σn - k) / Σn)
    unweighted_mean_stderr([se1, se2])         = sqrt(se1² + se2²) / 2
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxeval.errors import JaxevalError


def _check_lengths(a: Sequence, b: Sequence, what: str) -> None:
    if len(a) != len(b):
        raise JaxevalError(f"{what}: {len(a)} values but {len(b)} sizes")


def aggregate_subtask_metrics(
    metrics: Sequence[float], sizes: Sequence[int], weight_by_size: bool = True
) -> float:
    """The group score: the mean of subtask scores, weighted by subtask size unless told not to."""
    if not weight_by_size:
        sizes = [1] * len(sizes)
    _check_lengths(metrics, sizes, "aggregate_subtask_metrics")
    return sum([metric * size for metric, size in zip(metrics, sizes)]) / sum(sizes)


def pooled_sample_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float:
    """The stderr of a size-weighted group mean, from the pooled variance of the subtasks."""
    _check_lengths(stderrs, sizes, "pooled_sample_stderr")
    pooled_var = sum([(size - 1) * stderr**2 * size for size, stderr in zip(sizes, stderrs)]) / (
        sum(sizes) - len(sizes)
    )
    return np.sqrt(pooled_var / sum(sizes))


def unweighted_mean_stderr(stderrs: Sequence[float]) -> float:
    """The stderr of the plain mean of k subtask scores: `sqrt(Σ se_i²) / k`."""
    return np.sqrt(sum(stderr**2 for stderr in stderrs)) / len(stderrs)
