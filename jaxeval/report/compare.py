"""Two runs, document by document: which documents changed their score, and is the change real.

    A: samples_arc_easy.jsonl  doc 0 acc 1   doc 1 acc 0   doc 2 acc 1
    B: samples_arc_easy.jsonl  doc 0 acc 1   doc 1 acc 1   doc 2 acc 0
    -> flips doc 1 (A wrong, B right) and doc 2 (A right, B wrong); McNemar b = 1, c = 1, p = 1.0

Documents pair by (filter, doc_id) and must have the same `doc_hash` (else they are different
documents: a changed dataset or --samples; they are left out and a note says how many).
Perplexities and bits_per_byte get no test: they are corpus-level numbers (exp of minus the summed
loglikelihood over the summed length), not means of per-document values (a document's value is
its loglikelihood, or a (loglikelihood, length) pair). Nor does any metric whose per-document
value is not one number.

A multiple-choice pick is the choice with the highest loglikelihood for acc, and with the highest
loglikelihood per character of the choice for acc_norm (lm-eval's `lls / completion_len`, the
length of the choice without the target delimiter):

    choices " Paris" (ll -6.0, 5 characters), " the city of Paris" (ll -9.0, 17)
    -> acc's pick 0 (-6.0 > -9.0), acc_norm's pick 1 (-9.0 / 17 = -0.53 > -6.0 / 5 = -1.2)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.report.load import Run
from jaxeval.report.stats import mcnemar_exact, paired_t

# Corpus-level metrics: no paired test; the first three are drawn on a log axis (html.py).
PERPLEXITIES = ("perplexity", "word_perplexity", "byte_perplexity")
CORPUS_LEVEL = (*PERPLEXITIES, "bits_per_byte")
_CORPUS_AGGREGATIONS = ("perplexity", "weighted_perplexity", "bits_per_byte")


@dataclasses.dataclass(frozen=True)
class PairedMetric:
    """One metric of one task, over the documents both runs scored. McNemar's b, c for binary
    metrics (`a_only`: documents only A got right); `t` for the paired t-test."""

    task: str
    metric: str
    filter: str
    n: int
    a_mean: float
    b_mean: float
    test: str
    p_value: float
    a_only: int | None = None
    b_only: int | None = None
    t: float | None = None


@dataclasses.dataclass(frozen=True)
class Answer:
    """One run's answer to a document: its picks among the choices (`pick` by loglikelihood, as
    acc; `pick_norm` by loglikelihood per character, as acc_norm: module docstring) with the
    scores behind them, or the text it generated (`raw`: before the filter)."""

    text: str
    pick: int | None = None
    scores: tuple[float, ...] = ()
    raw: str | None = None
    pick_norm: int | None = None
    norm_scores: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class Flip:
    """A document whose binary metrics differ between the runs; `changed`: (metric, A, B)."""

    task: str
    filter: str
    doc_id: int
    prompt: str
    choices: tuple[str, ...]
    gold: int | None
    target: str
    a: Answer
    b: Answer
    changed: tuple[tuple[str, float, float], ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
    a: Run
    b: Run
    metrics: tuple[PairedMetric, ...]
    flips: dict[str, list[Flip]]
    notes: tuple[str, ...]


def shared_tasks(runs: list[Run]) -> list[str]:
    """Tasks in more than one run; with two runs or more and none shared, an error."""
    seen: dict[str, int] = {}
    for run in runs:
        for task in run.tasks:
            seen[task] = seen.get(task, 0) + 1
    shared = [t for t, n in seen.items() if n > 1]
    if len(runs) > 1 and not shared:
        listing = "; ".join(f"{r.results_file}: {', '.join(r.tasks) or 'no tasks'}" for r in runs)
        raise JaxevalError(
            f"the runs share no task ({listing})",
            field="RESULTS",
            hint="compare runs of the same tasks, or make one report per run",
        )
    return shared


def _arguments(row: dict[str, Any]) -> list[list[Any]]:
    args = row.get("arguments") or []
    if isinstance(args, dict):  # as saved: {"gen_args_0": {"arg_0": ctx, "arg_1": cont}}
        return [list(a.values()) for a in args.values()]
    return [list(a) for a in args]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def is_corpus_level(run: Run, task: str, metric: str) -> bool:
    """A perplexity or bits_per_byte, by name or by the aggregation the task names."""
    return metric in CORPUS_LEVEL or run.aggregation(task, metric) in _CORPUS_AGGREGATIONS


def choice_lengths(row: dict[str, Any], delimiter: str = " ") -> tuple[int, ...]:
    """Each choice's length in characters, as acc_norm divides by: the continuation without the
    target delimiter. () when the choices are contexts (one continuation for all, as winogrande)."""
    args = _arguments(row)
    continuations = [str(a[1]) for a in args if len(a) > 1]
    if len(continuations) != len(args):
        return ()
    if len(args) > 1 and len(set(continuations)) == 1 and len({str(a[0]) for a in args}) > 1:
        return ()
    return tuple(len(c.removeprefix(delimiter)) for c in continuations)


def _argmax(values: tuple[float, ...]) -> int:
    return max(range(len(values)), key=values.__getitem__)  # the first of ties, as np.argmax


def answer_of(row: dict[str, Any], output_type: str | None, delimiter: str = " ") -> Answer:
    """What a run answered, from a sample's `filtered_resps` (strings once saved)."""
    filtered = row.get("filtered_resps") or []
    resps = row.get("resps") or []
    if output_type == "multiple_choice" and filtered:
        scores = tuple(float(f[0]) for f in filtered)
        pick = _argmax(scores)
        lengths = choice_lengths(row, delimiter)
        norm: tuple[float, ...] = ()
        if len(lengths) == len(scores) and all(lengths):
            norm = tuple(s / n for s, n in zip(scores, lengths))
        pick_norm = _argmax(norm) if norm else None
        return Answer(f"choice {pick}", pick, scores, pick_norm=pick_norm, norm_scores=norm)
    if output_type == "loglikelihood" and filtered:
        loglik, greedy = filtered[0][0], filtered[0][1]
        return Answer(
            f"loglikelihood {float(loglik):.4f}, greedy: {greedy}", None, (float(loglik),)
        )
    text = str(filtered[0]) if filtered else ""
    raw = str(resps[0][0]) if resps and resps[0] else None
    return Answer(text, raw=raw)


def _flip(
    task: str, output_type: str | None, delimiter: str, ra: dict, rb: dict, changed: list
) -> Flip:
    args = _arguments(ra)
    choices = tuple(str(a[1]) for a in args) if output_type == "multiple_choice" else ()
    target = str(ra.get("target", ""))
    gold = None
    if choices:
        if target.isdigit() and int(target) < len(choices):
            gold = int(target)
        elif target.strip() in [c.strip() for c in choices]:
            gold = [c.strip() for c in choices].index(target.strip())
    return Flip(
        task=task,
        filter=str(ra.get("filter", "none")),
        doc_id=int(ra["doc_id"]),
        prompt=str(args[0][0]) if args and args[0] else "",
        choices=choices,
        gold=gold,
        target=target,
        a=answer_of(ra, output_type, delimiter),
        b=answer_of(rb, output_type, delimiter),
        changed=tuple(changed),
    )


def _test(task: str, metric: str, flt: str, pairs: list[tuple[float, float]]) -> PairedMetric:
    n = len(pairs)
    a_mean = math.fsum(a for a, _ in pairs) / n
    b_mean = math.fsum(b for _, b in pairs) / n
    if all(v in (0.0, 1.0) for pair in pairs for v in pair):
        a_only = sum(1 for a, b in pairs if a > b)
        b_only = sum(1 for a, b in pairs if b > a)
        p = mcnemar_exact(a_only, b_only)
        return PairedMetric(
            task, metric, flt, n, a_mean, b_mean, "McNemar exact", p, a_only, b_only
        )
    t, p = paired_t([b - a for a, b in pairs])
    return PairedMetric(task, metric, flt, n, a_mean, b_mean, "paired t", p, t=t)


def compare_runs(a: Run, b: Run) -> Comparison:
    """Paired tests per (task, metric, filter) and the flipped documents of every shared task."""
    metrics: list[PairedMetric] = []
    flips: dict[str, list[Flip]] = {}
    notes: list[str] = []
    for task in [t for t in a.tasks if t in b.tasks]:
        missing = [r.label for r in (a, b) if task not in r.samples]
        if missing:
            notes.append(
                f"{task}: no samples file for {' and '.join(missing)} (run with --log_samples): "
                "no per-document comparison"
            )
            continue
        output_type = a.output_type(task) or b.output_type(task)
        delimiter = a.target_delimiter(task)
        rows_b = {(r.get("filter", "none"), r["doc_id"]): r for r in b.samples[task]}
        paired: list[tuple[dict, dict]] = []
        other_docs = 0
        for ra in a.samples[task]:
            rb = rows_b.get((ra.get("filter", "none"), ra["doc_id"]))
            if rb is None:
                continue
            if ra.get("doc_hash") and rb.get("doc_hash") and ra["doc_hash"] != rb["doc_hash"]:
                other_docs += 1
                continue
            paired.append((ra, rb))
        if other_docs:
            notes.append(
                f"{task}: {other_docs} document(s) with the same doc_id differ between the runs "
                "(doc_hash): left out"
            )
        values: dict[tuple[str, str], list[tuple[float, float]]] = {}
        not_scalar: set[str] = set()
        corpus: set[str] = set()
        task_flips = []
        for ra, rb in paired:
            flt = str(ra.get("filter", "none"))
            changed = []
            for metric, va in ra["values"].items():
                if is_corpus_level(a, task, metric) or is_corpus_level(b, task, metric):
                    corpus.add(metric)
                    continue
                x, y = _number(va), _number(rb["values"].get(metric))
                if x is None or y is None:
                    not_scalar.add(metric)
                    continue
                values.setdefault((metric, flt), []).append((x, y))
                if x != y and x in (0.0, 1.0) and y in (0.0, 1.0):
                    changed.append((metric, x, y))
            if changed:
                task_flips.append(_flip(task, output_type, delimiter, ra, rb, changed))
        binary = set()
        for (metric, flt), pairs in values.items():
            if metric in not_scalar:
                continue
            result = _test(task, metric, flt, pairs)
            metrics.append(result)
            if result.test == "McNemar exact":
                binary.add(metric)
        if corpus:
            notes.append(
                f"{task}: {', '.join(sorted(corpus))}: computed from all the documents' "
                "loglikelihoods at once, not a mean of per-document values, so there is no "
                "paired test"
            )
        if not_scalar:
            notes.append(
                f"{task}: {', '.join(sorted(not_scalar))}: a document's value is not one number, "
                "so there is no paired test"
            )
        task_flips = [
            dataclasses.replace(f, changed=tuple(c for c in f.changed if c[0] in binary))
            for f in task_flips
        ]
        flips[task] = sorted(
            (f for f in task_flips if f.changed), key=lambda f: (f.doc_id, f.filter)
        )
    return Comparison(a, b, tuple(metrics), flips, tuple(notes))
