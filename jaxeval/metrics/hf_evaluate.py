"""Local versions of the Hugging Face `evaluate` metrics that lm-eval's catalogue names.

lm-eval looks a metric up in HF `evaluate` (which downloads its script from the hub) when the task
says `hf_evaluate: true` or when the name is not one of its own. jaxeval never reaches the hub: the
metrics below are implemented here with the same calling convention and results, and any other name
is an error that says which metric and what it would take.

    accuracy(references=["a"], predictions=["a"])            -> {"accuracy": 1.0}
    f1(references=[1], predictions=[2], average="micro")     -> {"f1": 0.0}
    wer(references=["the cat sat"], predictions=["the sat"]) -> 0.333...   (1 deletion / 3 words)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.registry import Registry

HF_EVALUATE: Registry[Callable[..., Any]] = Registry("HF evaluate metric")


def accuracy(
    *,
    references: Sequence,
    predictions: Sequence,
    normalize: bool = True,
    sample_weight: Sequence[float] | None = None,
) -> dict[str, float]:
    """sklearn's accuracy_score, as evaluate's `accuracy` calls it."""
    hits = [float(r == p) for r, p in zip(references, predictions)]
    weights = list(sample_weight) if sample_weight is not None else [1.0] * len(hits)
    total = sum(h * w for h, w in zip(hits, weights))
    return {"accuracy": float(total / sum(weights) if normalize else total)}


def f1(
    *,
    references: Sequence,
    predictions: Sequence,
    labels: Sequence | None = None,
    pos_label: Any = 1,
    average: str | None = "binary",
    sample_weight: Sequence[float] | None = None,
) -> dict[str, Any]:
    """evaluate's `f1` (sklearn's f1_score); needs scikit-learn, as evaluate's does."""
    try:
        from sklearn.metrics import f1_score
    except ImportError:
        raise JaxevalError(
            "the HF evaluate metric 'f1' needs scikit-learn", hint="pip install scikit-learn"
        ) from None
    score = f1_score(
        references,
        predictions,
        labels=labels,
        pos_label=pos_label,
        average=average,
        sample_weight=sample_weight,
    )
    return {"f1": float(score) if getattr(score, "size", 1) == 1 else score}


def _word_edits(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (substitutions, deletions, insertions all cost 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(
    *, references: Sequence[str], predictions: Sequence[str], concatenate_texts: bool = False
) -> float:
    """evaluate's `wer` (jiwer): total word edits / total reference words over all pairs."""
    if concatenate_texts:
        references, predictions = [" ".join(references)], [" ".join(predictions)]
    edits = sum(_word_edits(r.split(), p.split()) for r, p in zip(references, predictions))
    words = sum(len(r.split()) for r in references)
    return float(edits / words) if words else float(edits > 0)


for _name, _fn in {"accuracy": accuracy, "f1": f1, "wer": wer}.items():
    HF_EVALUATE.add(_name, _fn)


def missing_message(name: str) -> str:
    return (
        f"metric '{name}' is neither an lm-eval metric nor one of the HF evaluate metrics "
        f"jaxeval implements ({', '.join(HF_EVALUATE.names())}); lm-eval would download it "
        "with `evaluate.load`, which jaxeval never does"
    )
