"""Binary F1 and the Matthews correlation over `(gold, pred)` pairs, equal to scikit-learn's.

lm-eval aggregates these with `sklearn.metrics.f1_score(golds, preds)` (binary, `pos_label=1`) and
`sklearn.metrics.matthews_corrcoef(golds, preds)`. scikit-learn is a test-only dependency here: these
are written from the confusion-matrix definitions with the same floating-point operations, so the
numbers are identical, including the zero-denominator cases (both return 0.0).

    f1([(1, 1), (1, 0), (0, 1), (0, 0)])          -> 2·1 / (2 + 2) = 0.5
    matthews_corrcoef([(1, 1), (0, 0)])           -> 1.0
    matthews_corrcoef([(1, 1), (1, 1)])           -> 0.0   (one class only: zero denominator)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError


def _unzip(pairs: Sequence[tuple[Any, Any]]) -> tuple[list, list]:
    golds, preds = zip(*pairs)
    return list(golds), list(preds)


def _sorted_labels(golds: list, preds: list) -> list:
    return sorted(set(golds) | set(preds))


def f1(pairs: Sequence[tuple[Any, Any]]) -> np.float64:
    """Binary F1 of the positive class 1: `2·tp / (2·tp + fp + fn)`, 0.0 when the denominator is 0.

    More than two distinct labels, or two labels without 1 among them, is an error, as in sklearn.
    A NumPy float64, as lm-eval's `np.max(f1_score(...))` returns: Python's `sum` adds those left
    to right on every interpreter (3.12 compensates Python floats only), so sums over f1 values
    (the bootstrap stderr's) come out as lm-eval's.
    """
    golds, preds = _unzip(pairs)
    labels = _sorted_labels(golds, preds)
    if len(labels) > 2:
        raise JaxevalError(
            f"the f1 aggregation is binary, but the golds and predictions hold {len(labels)} labels "
            f"({labels[:5]}{' ...' if len(labels) > 5 else ''})",
            hint="use f1 only for two-choice tasks whose positive label is 1, or use mcc",
        )
    if len(labels) == 2 and 1 not in labels:
        raise JaxevalError(
            f"the f1 aggregation needs the positive label 1, but the labels are {labels}",
            hint="map the labels to 0/1",
        )
    tp = sum(1 for g, p in zip(golds, preds) if g == 1 and p == 1)
    true_sum = sum(1 for g in golds if g == 1)
    pred_sum = sum(1 for p in preds if p == 1)
    denom = 1.0 * float(true_sum) + float(pred_sum)  # sklearn: beta² · true_sum + pred_sum
    if denom == 0:
        return np.float64(0.0)
    return np.float64(2.0 * float(tp)) / np.float64(denom)


def matthews_corrcoef(pairs: Sequence[tuple[Any, Any]]) -> float:
    """Multiclass Matthews correlation from the confusion matrix; 0.0 on a zero denominator.

    With t, p the per-class true and predicted counts:

        cov(t, p) = correct · n - Σ_k t_k p_k      cov(t, t) = n² - Σ_k t_k²      cov(p, p) = n² - Σ_k p_k²
        mcc       = cov(t, p) / sqrt(cov(t, t) · cov(p, p))
    """
    golds, preds = _unzip(pairs)
    index = {label: i for i, label in enumerate(_sorted_labels(golds, preds))}
    k = len(index)
    confusion = np.zeros((k, k), dtype=np.int64)  # rows: true class, columns: predicted
    np.add.at(confusion, ([index[g] for g in golds], [index[p] for p in preds]), 1)
    t_sum = confusion.sum(axis=1, dtype=np.float64)  # per class
    p_sum = confusion.sum(axis=0, dtype=np.float64)  # per class
    n_correct = np.trace(confusion, dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    denom = cov_ypyp * cov_ytyt
    if denom == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(denom))
