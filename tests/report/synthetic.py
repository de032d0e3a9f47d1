"""Runs as lm-eval 0.4.13 writes them, from numbers made up here: a checkpoint sweep, an n-shot pair.

    write_sweep(out, steps=(1000, ..., 64000))   one run per checkpoint of a long absolute path
                                                 (out/__mnt__...__checkpoint-1000/results_*.json)
    write_n_shot_pair(out)                       HuggingFaceTB/SmolLM2-135M, 0-shot and 5-shot

Each run has arc_easy (multiple_choice: acc, acc_norm), lambada_openai (loglikelihood:
perplexity, acc) and wikitext (loglikelihood_rolling: word_perplexity, byte_perplexity,
bits_per_byte), with samples files. The per-document values follow lm-eval's rules (acc_norm
picks by loglikelihood per character of the choice; the perplexities are corpus-level), and the
aggregates are computed from them. `skill` (0 to 1) sets how good a run is: the first checkpoint
has a perplexity in the thousands, the last one near 10.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from typing import Any

SWEEP_ROOT = (
    "/mnt/shared/experiments/smollm2-135m-continued-pretraining/"
    "run-2025-06-01-lr3e-4-warmup2000-bs512-seq2048/checkpoints"
)
STEPS = (1000, 2000, 4000, 8000, 16000, 32000, 64000)
DOCS = 24
_SUBJECTS = ("a plant", "the Moon", "a magnet", "water", "a volcano", "the heart", "ice", "sound")
_CHOICES = (
    "It grows.",
    "Energy from sunlight is stored in sugar.",
    "The gravitational pull of a much larger object nearby.",
    "Heat.",
    "It reflects light from the Sun.",
    "Particles move faster and spread apart when warmed.",
    "Friction.",
    "It pumps blood through the body.",
)


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _stderr(values: list[float]) -> float:
    n = len(values)
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _row(doc_id: int, doc: dict, target: str, args: list[tuple], resps: list, filtered: list):
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": target,
        "arguments": {
            f"gen_args_{i}": {f"arg_{j}": a for j, a in enumerate(arg)}
            for i, arg in enumerate(args)
        },
        "resps": resps,
        "filtered_resps": filtered,
        "filter": "none",
        "doc_hash": _sha(doc),
        "prompt_hash": _sha([a[0] for a in args]),
        "target_hash": _sha(target),
    }


def arc_easy(skill: float, seed: int) -> tuple[dict, list[dict]]:
    rng = random.Random(seed)
    docs = random.Random(0)  # the same documents in every run
    rows = []
    for doc_id in range(DOCS):
        subject = _SUBJECTS[doc_id % len(_SUBJECTS)]
        choices = docs.sample(_CHOICES, 4)
        gold = docs.randrange(4)
        doc = {"question": f"Which statement best describes {subject}? ({doc_id})", "gold": gold}
        ctx = f"Question: {doc['question']}\nAnswer:"
        lls = [
            -len(c) * (0.12 + 0.1 * rng.random()) * (1.5 - skill)
            - 3 * rng.random()
            + (2.5 * skill if i == gold else 0)
            for i, c in enumerate(choices)
        ]
        pick = max(range(4), key=lls.__getitem__)
        norm = [ll / len(c) for ll, c in zip(lls, choices)]
        pick_norm = max(range(4), key=norm.__getitem__)
        filtered = [[repr(ll), "False"] for ll in lls]
        row = _row(
            doc_id, doc, str(gold), [(ctx, " " + c) for c in choices], [[f] for f in filtered],
            filtered,
        )  # fmt: skip
        row.update(metrics=["acc", "acc_norm"], acc=float(pick == gold))
        row["acc_norm"] = float(pick_norm == gold)
        rows.append(row)
    results = {}
    for metric in ("acc", "acc_norm"):
        values = [r[metric] for r in rows]
        results[f"{metric},none"] = sum(values) / DOCS
        results[f"{metric}_stderr,none"] = _stderr(values)
    return results, rows


def lambada(skill: float, seed: int) -> tuple[dict, list[dict]]:
    rng = random.Random(seed + 1)
    rows = []
    for doc_id in range(DOCS):
        doc = {"text": f"She put the kettle on and waited for the water to {doc_id} boil"}
        ctx, word = doc["text"].rsplit(" ", 1)
        ll = -(8.0 * (1 - skill) ** 2 + 2.3) * (0.5 + rng.random())
        greedy = ll > -2.5
        row = _row(doc_id, doc, " " + word, [(ctx, " " + word)], [[[repr(ll), str(greedy)]]],
                   [[repr(ll), str(greedy)]])  # fmt: skip
        row.update(metrics=["perplexity", "acc"], perplexity=ll, acc=float(greedy))
        rows.append(row)
    lls = [r["perplexity"] for r in rows]
    accs = [r["acc"] for r in rows]
    return {
        "perplexity,none": math.exp(-sum(lls) / DOCS),
        "perplexity_stderr,none": math.exp(-sum(lls) / DOCS) * _stderr(lls),
        "acc,none": sum(accs) / DOCS,
        "acc_stderr,none": _stderr(accs),
    }, rows


def wikitext(skill: float, seed: int) -> tuple[dict, list[dict]]:
    rng = random.Random(seed + 2)
    rows = []
    for doc_id in range(DOCS // 4):
        text = " ".join(["The river flows through the valley past the old mill."] * (3 + doc_id))
        words, size = len(text.split()), len(text.encode("utf-8"))
        ll = -size * (0.55 + 2.2 * (1 - skill) ** 2) * (0.9 + 0.2 * rng.random())
        row = _row(doc_id, {"page": text}, "", [(text,)], [[repr(ll)]], [repr(ll)])
        row.update(metrics=["word_perplexity", "byte_perplexity", "bits_per_byte"])
        row.update(
            word_perplexity=[ll, words], byte_perplexity=[ll, size], bits_per_byte=[ll, size]
        )
        rows.append(row)
    total = sum(r["word_perplexity"][0] for r in rows)
    words = sum(r["word_perplexity"][1] for r in rows)
    size = sum(r["byte_perplexity"][1] for r in rows)
    return {
        "word_perplexity,none": math.exp(-total / words),
        "word_perplexity_stderr,none": "N/A",
        "byte_perplexity,none": math.exp(-total / size),
        "byte_perplexity_stderr,none": "N/A",
        "bits_per_byte,none": -total / size / math.log(2),
        "bits_per_byte_stderr,none": "N/A",
    }, rows


TASKS = {  # name: (make, output_type, {metric: (aggregation, higher_is_better)})
    "arc_easy": (arc_easy, "multiple_choice", {"acc": ("mean", True), "acc_norm": ("mean", True)}),
    "lambada_openai": (
        lambada, "loglikelihood", {"perplexity": ("perplexity", False), "acc": ("mean", True)}
    ),
    "wikitext": (
        wikitext,
        "loglikelihood_rolling",
        {
            "word_perplexity": ("weighted_perplexity", False),
            "byte_perplexity": ("weighted_perplexity", False),
            "bits_per_byte": ("bits_per_byte", False),
        },
    ),
}  # fmt: skip


def write_run(
    out: Path, *, model_args: str, skill: float, date: str, n_shot: int = 0, seed: int = 0
) -> Path:
    """One run's results and samples files, laid out as lm-eval's EvaluationTracker does."""
    pretrained = dict(kv.split("=", 1) for kv in model_args.split(","))["pretrained"]
    folder = out / pretrained.replace("/", "__")
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"results": {}, "group_subtasks": {}, "configs": {}, "versions": {}}
    results.update({"n-shot": {}, "higher_is_better": {}, "n-samples": {}})
    for name, (make, output_type, metrics) in TASKS.items():
        values, rows = make(skill, seed)
        shots = 0 if name == "wikitext" else n_shot
        results["results"][name] = {"alias": name, **values}
        results["configs"][name] = {
            "task": name,
            "output_type": output_type,
            "target_delimiter": " ",
            "num_fewshot": shots,
            "metric_list": [
                {"metric": m, "aggregation": agg, "higher_is_better": hib}
                for m, (agg, hib) in metrics.items()
            ],
        }
        results["versions"][name] = 1.0
        results["n-shot"][name] = shots
        results["higher_is_better"][name] = {m: hib for m, (_, hib) in metrics.items()}
        results["n-samples"][name] = {"original": len(rows), "effective": len(rows)}
        lines = "".join(json.dumps(r) + "\n" for r in rows)
        (folder / f"samples_{name}_{date}.jsonl").write_text(lines, encoding="utf-8")
    results["config"] = {"model": "hf", "model_args": model_args, "limit": None, "gen_kwargs": None}
    results.update(
        lm_eval_version="0.4.13",
        model_source="hf",
        model_name=pretrained,
        model_name_sanitized=pretrained.replace("/", "__"),
        chat_template=None,
        chat_template_sha=None,
        fewshot_as_multiturn=True,
        system_instruction=None,
    )
    file = folder / f"results_{date}.json"
    file.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return file


def write_sweep(out: Path, steps: tuple[int, ...] = STEPS) -> list[Path]:
    """A results file per checkpoint, skill rising with the step."""
    files = []
    for i, step in enumerate(steps):
        skill = min(
            0.95, 0.12 + 0.8 * math.log(step / steps[0] + 1) / math.log(steps[-1] / steps[0] + 1)
        )
        args = f"pretrained={SWEEP_ROOT}/checkpoint-{step},dtype=bfloat16"
        date = f"2025-06-{i + 1:02d}T09-30-00.{i + 1:06d}"
        files.append(write_run(out, model_args=args, skill=skill if i else 0.0, date=date, seed=i))
    return files


def write_n_shot_pair(out: Path) -> list[Path]:
    """One model at 0 and 5 shots, the same folder (as two lm-eval runs write it)."""
    args = "pretrained=HuggingFaceTB/SmolLM2-135M,dtype=float32"
    return [
        write_run(out, model_args=args, skill=0.55, date="2025-06-10T08-00-00.000001", seed=1),
        write_run(
            out, model_args=args, skill=0.62, date="2025-06-10T09-00-00.000002", n_shot=5, seed=2
        ),
    ]
