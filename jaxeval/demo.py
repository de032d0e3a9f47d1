"""`jaxeval demo`: an offline end-to-end run through the real JAX path.

Builds a tiny Llama checkpoint (a byte-level BPE tokenizer trained on the bundled demo rows, random
weights written as safetensors, no torch), loads it through the same loader as any Hugging Face
checkpoint, and evaluates the bundled `jaxeval_demo` tasks (ARC-Easy multiple choice, LAMBADA).
The weights are random, so the scores are near chance; the point is the path, not the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from importlib import resources


def _demo_texts() -> list[str]:
    folder = resources.files("jaxeval.tasks") / "demo"
    texts = []
    for name in ("arc_easy_sample.jsonl", "lambada_sample.jsonl"):
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts.append(row.get("text") or row["question"] + " " + " ".join(row["choices"]["text"]))
    return texts


def build_demo_model(out_dir: str, *, seed: int = 0) -> str:
    """Writes tokenizer + config + random weights into `out_dir` (idempotent); returns it."""
    from jaxeval.tiny import train_tokenizer, write_tiny_llama

    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        return out_dir
    train_tokenizer(_demo_texts(), out_dir, style="llama", vocab_size=512)
    write_tiny_llama(out_dir, out_dir, seed=seed, std=0.02)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jaxeval demo", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", default=os.path.join(os.path.expanduser("~"), ".cache", "jaxeval", "demo-llama"))
    p.add_argument("--output_path", default=None)
    args = p.parse_args(argv)

    import jaxeval
    from jaxeval.output import make_table, save_results

    start = time.time()
    model_dir = build_demo_model(args.model_dir)
    model_args = f"pretrained={model_dir},dtype=float32"
    results = jaxeval.simple_evaluate(model="jax", model_args=model_args, tasks=["jaxeval_demo"],
                                      bootstrap_iters=1000, log_samples=bool(args.output_path))
    print(f"jaxeval demo: tiny Llama at {model_dir} (random weights: chance-level scores), "
          f"{time.time() - start:.1f}s end to end")
    print(make_table(results))
    if args.output_path:
        print(f"Results written to {save_results(results, args.output_path, model_args=model_args, model_source='jax', start_time=start)}")
    return 0
