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


def rouge(
    *,
    predictions: Sequence[str],
    references: Sequence,
    rouge_types: Sequence[str] | None = None,
    use_aggregator: bool = True,
    use_stemmer: bool = False,
    tokenizer: Any = None,
) -> dict:
    """evaluate's `rouge` over the `rouge_score` package: mid F-measure of the bootstrap aggregate
    (use_aggregator) or the per-pair F-measures."""
    try:
        from rouge_score import rouge_scorer, scoring
    except ImportError:
        raise JaxevalError(
            "the HF evaluate metric 'rouge' needs rouge_score", hint="pip install rouge_score"
        ) from None
    types = list(rouge_types or ["rouge1", "rouge2", "rougeL", "rougeLsum"])
    scorer = rouge_scorer.RougeScorer(
        rouge_types=types, use_stemmer=use_stemmer, tokenizer=tokenizer
    )
    multi = isinstance(references[0], list)
    scores = [
        scorer.score_multi(r, p) if multi else scorer.score(r, p)
        for r, p in zip(references, predictions)
    ]
    if not use_aggregator:
        return {key: [s[key].fmeasure for s in scores] for key in scores[0]}
    aggregator = scoring.BootstrapAggregator()
    for s in scores:
        aggregator.add_scores(s)
    return {key: value.mid.fmeasure for key, value in aggregator.aggregate().items()}


CODE_EVAL_ENV = "HF_ALLOW_CODE_EVAL"


def _passes(program: str, timeout: float) -> bool:
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    import numpy as np

    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def code_eval(
    *,
    predictions: Sequence[Sequence[str]],
    references: Sequence[str],
    k: Sequence[int] = (1, 10, 100),
    num_workers: int = 4,
    timeout: float = 3.0,
) -> tuple[dict[str, float], dict[int, list]]:
    """evaluate's `code_eval`: each candidate + "\\n" + test program runs in its own Python process
    (pass = exit status 0 within `timeout` s); pass@k averaged over tasks. Runs untrusted code, so,
    as evaluate's, it refuses unless HF_ALLOW_CODE_EVAL=1."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    if os.environ.get(CODE_EVAL_ENV) != "1":
        raise ValueError(
            f"code_eval executes model-written code; set {CODE_EVAL_ENV}=1 to allow it"
        )
    jobs = [
        (t, j, cand + "\n" + test)
        for t, (cands, test) in enumerate(zip(predictions, references))
        for j, cand in enumerate(cands)
    ]
    with ThreadPoolExecutor(max_workers=max(1, num_workers)) as pool:
        passed = list(pool.map(lambda job: _passes(job[2], timeout), jobs))
    results: dict[int, list] = {}
    for (t, j, _), ok in zip(jobs, passed):
        results.setdefault(t, []).append((j, {"task_id": t, "completion_id": j, "passed": ok}))
    totals = [len(c) for c in predictions]
    correct = [sum(r["passed"] for _, r in results.get(t, [])) for t in range(len(predictions))]
    ks = [k] if isinstance(k, int) else list(k)
    out = {
        f"pass@{kk}": sum(pass_at_k_estimate(n, c, kk) for n, c in zip(totals, correct))
        / len(totals)
        for kk in ks
        if all(n >= kk for n in totals)
    }
    return out, results


for _name, _fn in {"rouge": rouge, "code_eval": code_eval}.items():
    HF_EVALUATE.add(_name, _fn)


class LocalEvaluationModule:
    """What `evaluate.load(name)` gives a task helper for a metric jaxeval implements."""

    def __init__(self, name: str):
        self.name = name
        self._fn = HF_EVALUATE.get(name)

    def compute(self, **kwargs: Any) -> Any:
        return self._fn(**kwargs)


def local_load(original: Callable[..., Any]) -> Callable[..., Any]:
    """`evaluate.load` that serves our metrics locally and passes any other name to `original`."""

    def load(path: str, *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, str) and path in HF_EVALUATE:
            return LocalEvaluationModule(path)
        return original(path, *args, **kwargs)

    load.jaxeval_local = True  # type: ignore[attr-defined]
    return load
