"""Runs for the report's tests, made by the real evaluators with the deterministic fake model.

jaxeval_run(out, salt="b")     jaxeval on arc_easy and gsm8k (20 documents each), --log_samples
                               layout; `salt` changes every answer, so two salts disagree
tests/report/data/             made by `python -m tests.report.runs` (a slow test checks that
  lm_eval/                     both evaluators still write the same scores): lm-eval 0.4.13's
                               EvaluationTracker with the unsalted fake model, then jaxeval
  jaxeval/                     with the same answers (salt "": the same scores, no flips)
  jaxeval_b/                   and with other answers (salt "b")
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.api import fake_lm

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "tests" / "data"
RUNS = HERE / "data"  # lm_eval/, jaxeval/, jaxeval_b/: each <model>/results_*.json + samples
TASKS = ["arc_easy", "gsm8k"]
LIMIT = 20
NUM_FEWSHOT = 0  # gsm8k's five-shot prompts would make the samples files five times larger
# gsm8k answers: the fake model's own phrases, and two that carry the gold number (about 2 in 9)
GENERATIONS = [*fake_lm.GENERATIONS, " So {gold} in all.\n#### {gold}", " #### {gold}"]


def gsm8k_gold(ctx: str) -> str | None:
    """The gold number of the gsm8k question a prompt ends with (tests/data/gsm8k/test.jsonl)."""
    if not GOLD:
        with open(DATA / "gsm8k" / "test.jsonl", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                GOLD[row["question"]] = row["answer"].rsplit("####", 1)[1].strip()
    question = ctx.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:")
    return GOLD.get(question)


GOLD: dict[str, str] = {}


def salted_lm(salt: str):
    """jaxeval's fake model whose answers depend on `salt` ("" gives fake_lm's own answers)."""
    base = type(fake_lm.make_jaxeval_lm())

    class Salted(base):
        def loglikelihood(self, requests):
            return [
                fake_lm.loglikelihood(salt + ctx, cont) for ctx, cont in (r.args for r in requests)
            ]

        def generate_until(self, requests):
            return [
                fake_lm.generate(salt + ctx, kw, GENERATIONS, lambda c: gsm8k_gold(c[len(salt) :]))
                for ctx, kw in (r.args for r in requests)
            ]

    return Salted()


def jaxeval_run(out: Path, salt: str, *, task_manager=None) -> Path:
    """Evaluates `TASKS` with jaxeval and the salted fake model; returns the results file."""
    import jaxeval
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.results.files import save_results

    tm = task_manager or TaskManager(data_dir=str(DATA))
    results = jaxeval.simple_evaluate(
        model=salted_lm(salt), tasks=TASKS, limit=LIMIT, num_fewshot=NUM_FEWSHOT, task_manager=tm, bootstrap_iters=200,
        log_samples=True,
    )  # fmt: skip
    model_args = f"pretrained=fake-model{'-' + salt if salt else ''}"
    return save_results(results, str(out), model_args=model_args, model_source="jax")


LM_EVAL_YAML = {  # task -> (its lm-eval YAML, {split: file under tests/data}, extra keys)
    "arc_easy": ("arc/arc_easy.yaml", {"test": "ai2_arc/ARC-Easy/test.jsonl",
                                       "validation": "ai2_arc/ARC-Easy/validation.jsonl"},
                 "fewshot_split: validation\n"),
    "gsm8k": ("gsm8k/gsm8k.yaml", {"test": "gsm8k/test.jsonl", "train": "gsm8k/train.jsonl"}, ""),
}  # fmt: skip


def write_lm_eval_run(out: Path) -> None:
    """lm-eval's own files for `TASKS` (the unsalted fake model), under `out`."""
    import lm_eval
    import lm_eval.tasks
    from lm_eval.loggers import EvaluationTracker

    tasks_dir = Path(lm_eval.tasks.__file__).parent
    yaml_dir = Path(tempfile.mkdtemp(prefix="lm_eval_yaml_"))
    for task, (rel, files, extra) in LM_EVAL_YAML.items():
        lines = [
            f"include: {tasks_dir / rel}",
            f"task: {task}",
            "dataset_path: json",
            "dataset_name: null",
            "dataset_kwargs:",
            "  data_files:",
        ]
        lines += [f"    {split}: {DATA / f}" for split, f in files.items()]
        (yaml_dir / f"{task}.yaml").write_text("\n".join(lines) + "\n" + extra)
    tracker = EvaluationTracker(output_path=str(out))
    manager = lm_eval.tasks.TaskManager(include_path=str(yaml_dir))
    results = lm_eval.simple_evaluate(
        model=fake_lm.make_lm_eval_lm(generations=GENERATIONS, gold_of=gsm8k_gold), model_args="pretrained=fake-model", tasks=TASKS,
        limit=LIMIT, num_fewshot=NUM_FEWSHOT, bootstrap_iters=200, log_samples=True, evaluation_tracker=tracker,
        task_manager=manager,
    )  # fmt: skip
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for name in results["configs"]:
        tracker.save_results_samples(task_name=name, samples=samples[name])
    shutil.rmtree(yaml_dir)
    for file in out.rglob("results_*.json"):  # this machine's paths out of the configs
        text = file.read_text(encoding="utf-8")
        pairs = ((str(DATA), "tests/data"), (str(tasks_dir), "lm_eval/tasks"), (str(yaml_dir), "."))
        for path, short in pairs:
            text = text.replace(path, short)
        file.write_text(text, encoding="utf-8")


def write_all(root: Path) -> None:
    """The committed runs: lm-eval's, jaxeval's with the same answers (salt ""), and jaxeval's
    with other answers (salt "b")."""
    for name in ("lm_eval", "jaxeval", "jaxeval_b"):
        shutil.rmtree(root / name, ignore_errors=True)
    write_lm_eval_run(root / "lm_eval")
    jaxeval_run(root / "jaxeval", "")
    jaxeval_run(root / "jaxeval_b", "b")


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    write_all(target)
    print("\n".join(str(p) for p in sorted(target.rglob("*.json*"))))
