"""Train a small Flax nnx Llama with optax and evaluate it in process every few steps, no checkpoint.

    python examples/train_and_evaluate.py                 # ~1-2 minutes on 2 CPU cores
    python examples/train_and_evaluate.py --steps 1000 --eval_every 100 --out run.png
    python examples/train_and_evaluate.py --tensorboard tb/ --results_dir runs/
    jaxeval report runs/ -o report.html                   # curves by step, first vs last checkpoint

Text (about 250 KB, all bundled with the repository): five WikiText-2 test pages, LAMBADA, BoolQ
and DROP passages (tests/data), and ARC-Easy validation and GSM8K train rows as
"Question: ...\\nAnswer: ..." lines; a byte-level BPE tokenizer is trained on the same text.
Every `--eval_every` steps the model is scored on three bundled tasks:
`demo_arc_easy` (multiple choice), `demo_wikitext` (rolling perplexity on a page not trained on)
and `demo_gsm8k` (5-shot generation), through `jaxeval.InMemoryLM`: the parameters stay on the
device and the compiled kernels are reused, so only the first evaluation compiles. Each
evaluation prints lm-eval's table; at the end a PNG plots the metrics against the step.

Logging per step: `jaxeval.trackers.flatten_results` turns each evaluation into flat scalars
(`eval/demo_arc_easy/acc_norm`, `eval/demo_gsm8k/exact_match/flexible-extract`, ...), which
`--tensorboard DIR` writes as TensorBoard event files (`pip install "jaxeval[tensorboard]"`;
`jaxeval.trackers.WandbStepLogger` does the same for W&B). `--results_dir DIR` saves every
evaluation as lm-eval's results and samples files (DIR/step_000040/...), the model's step in them,
so `jaxeval report DIR` draws the metrics against the step and compares checkpoints document by
document.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `examples.nnx_llama` when run as a script

TASKS = ["demo_arc_easy", "demo_wikitext", "demo_gsm8k"]
METRICS = {  # what the plot shows: (task, metric key, label)
    "arc": ("demo_arc_easy", "acc_norm,none", "ARC-Easy acc_norm"),
    "ppl": ("demo_wikitext", "word_perplexity,none", "WikiText word perplexity"),
    "gsm8k": ("demo_gsm8k", "exact_match,flexible-extract", "GSM8K exact match (flexible)"),
}


def training_text() -> list[str]:
    """WikiText pages 1-5 (page 0 is the evaluation page), ARC-Easy validation, GSM8K train, and
    the LAMBADA, BoolQ and DROP passages: about 250 KB."""

    def rows(path: pathlib.Path) -> list[dict]:
        with open(path) as f:
            return [json.loads(line) for line in f]

    data = REPO / "tests" / "data"
    texts = [r["page"] for r in rows(data / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl")]
    texts = texts[1:]
    for r in rows(data / "ai2_arc/ARC-Easy/validation.jsonl"):
        answer = r["choices"]["text"][r["choices"]["label"].index(r["answerKey"])]
        texts.append(f"Question: {r['question']}\nAnswer: {answer}\n\n")
    for r in rows(REPO / "tasks/demo/data/gsm8k/train.jsonl"):
        texts.append(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n")
    texts += [r["text"] + "\n\n" for r in rows(data / "lambada_openai/test.jsonl")]
    texts += [r["passage"] + "\n\n" for r in rows(data / "boolq/validation.jsonl")]
    texts += sorted({r["passage"] + "\n\n" for r in rows(data / "drop/validation.jsonl")})
    return texts


def token_stream(tokenizer, texts: list[str]):
    import numpy as np

    ids = []
    for text in texts:
        ids.extend(tokenizer(text)["input_ids"])
    return np.asarray(ids, np.int32)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--eval_every", type=int, default=40)
    parser.add_argument("--limit", type=int, default=20, help="documents per task per evaluation")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--max_gen_toks", type=int, default=16)
    parser.add_argument("--out", default="train_and_evaluate.png", help="the plot (PNG)")
    parser.add_argument("--tensorboard", default=None, help="write TensorBoard event files here")
    parser.add_argument("--results_dir", default=None, help="save each evaluation's files here")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx

    import jaxeval
    from examples.nnx_llama import LlamaConfig, NnxLlama, next_token_loss
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.demo.tiny import train_tokenizer
    from jaxeval.results.files import make_table, save_results
    from jaxeval.trackers import TensorBoardLogger, flatten_results

    start = time.perf_counter()
    texts = training_text()
    tok_dir = train_tokenizer(texts, tempfile.mkdtemp(prefix="tok_"), vocab_size=1024)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    stream = token_stream(tokenizer, texts)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.width,
        intermediate_size=2 * args.width,
        max_position_embeddings=256,
    )
    model = NnxLlama(cfg, rngs=nnx.Rngs(0))
    schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 20, max(args.steps, 21), 3e-4)
    optimizer = nnx.Optimizer(model, optax.adamw(schedule, weight_decay=0.01), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, batch):
        loss, grads = nnx.value_and_grad(next_token_loss)(model, batch)
        optimizer.update(model, grads)
        return loss

    lm = jaxeval.InMemoryLM.from_nnx(
        model,
        tokenizer=tokenizer,
        max_length=cfg.max_position_embeddings,
        hidden=NnxLlama.hidden,
        head_weight=NnxLlama.head_weight,
        name="train_and_evaluate",
        progress=False,
    )
    tasks = TaskManager()  # parsed once, reused by every evaluation
    rng = np.random.default_rng(0)
    history: dict[str, list] = {"step": [], "loss": [], "eval_s": [], **{k: [] for k in METRICS}}
    history["scalars"] = []  # flatten_results of each evaluation
    tensorboard = TensorBoardLogger(args.tensorboard) if args.tensorboard else None

    def evaluate(step: int, loss: float) -> None:
        t0 = time.perf_counter()
        lm.update_params(model, step=step)  # the trained arrays, where they are
        results = jaxeval.simple_evaluate(
            model=lm,
            tasks=TASKS,
            limit=args.limit,
            gen_kwargs=f"max_gen_toks={args.max_gen_toks}",
            bootstrap_iters=0 if args.results_dir is None else 100,
            log_samples=args.results_dir is not None,
            task_manager=tasks,
        )
        history["scalars"].append(flatten_results(results))
        if tensorboard is not None:
            tensorboard.log_results(results, step=step)
            if step > 0:
                tensorboard.log_scalars({"train/loss": loss}, step=step)
        if args.results_dir:  # results["config"]["in_memory"]["step"] says which checkpoint
            folder = os.path.join(args.results_dir, f"step_{step:06d}")
            save_results(
                results, folder, model_args="pretrained=train_and_evaluate", model_source="jax"
            )
        history["step"].append(step)
        history["loss"].append(loss)
        history["eval_s"].append(time.perf_counter() - t0)
        for key, (task, metric, _) in METRICS.items():
            history[key].append(float(results["results"][task][metric]))
        compiled = lm.scorer.compile_count + lm.generator.compile_count
        print(
            f"\n== step {step}: train loss {loss:.3f}, evaluation {history['eval_s'][-1]:.1f} s "
            f"({compiled} executables so far)"
        )
        print(make_table(results))

    loss = float("nan")
    for step in range(args.steps + 1):
        if step % args.eval_every == 0 or step == args.steps:
            evaluate(step, loss)
        if step == args.steps:
            break
        starts = rng.integers(0, len(stream) - args.seq_len - 1, args.batch)
        batch = np.stack([stream[s : s + args.seq_len + 1] for s in starts])
        loss = float(train_step(model, optimizer, jnp.asarray(batch)))

    if tensorboard is not None:
        tensorboard.close()
    plot(history, args.out)
    history["total_s"] = time.perf_counter() - start
    ppl = history["ppl"]
    print(
        f"\nWikiText word perplexity {ppl[0]:.1f} -> {ppl[-1]:.1f} in {args.steps} steps; "
        f"{history['total_s']:.0f} s in all; plot: {os.path.abspath(args.out)}"
    )
    print(f"devices: {jax.devices()}")
    return history


def plot(history: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS) + 1, figsize=(4 * (len(METRICS) + 1), 3.2))
    steps = history["step"]
    axes[0].plot(steps[1:], history["loss"][1:], marker="o")
    axes[0].set_title("train loss")
    for ax, (key, (_, _, label)) in zip(axes[1:], METRICS.items()):
        ax.plot(steps, history[key], marker="o")
        ax.set_title(label)
        if key == "ppl":
            ax.set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
