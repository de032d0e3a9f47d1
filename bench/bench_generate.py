"""Greedy generation throughput: jaxeval's compiled kernel vs lm-eval 0.4.13's HF backend, one run.

    python bench/bench_generate.py [--prompts 50] [--new 64] [--batch-size 16] [--repeats 3]

Builds a random Llama (hidden 256, 4 layers, 8 heads / 4 kv heads, a small BPE vocabulary) offline, then
generates `--new` tokens for each of `--prompts` prompts of mixed lengths (no stop string fires, so
every row runs the full budget unless it emits EOS) with both implementations on the CPU, and prints
generated tokens per second, best of `--repeats` timed runs each. jaxeval's runs are warm (a first,
untimed run compiles); its compile time is reported separately. Outputs are checked to be string-identical.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LMEVAL_DISABLE_MULTIPROC", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

WORDS = (
    "the quick brown fox jumps over the lazy dog question what is the capital of france answer "
    "paris in 1969 neil armstrong became the first person to walk on the moon water boils at 100 "
    "degrees celsius at sea level she sells sea shells by the sea shore premise all cats are mammals"
).split()


def make_model(root: str, texts: list[str]) -> str:
    from jaxeval.demo.tiny import train_tokenizer, write_tiny_llama

    tok_dir = train_tokenizer(texts, os.path.join(root, "tok"), style="llama", vocab_size=1024)
    return write_tiny_llama(
        os.path.join(root, "llama-256x4"),
        tok_dir,
        hidden=256,
        layers=4,
        heads=8,
        kv_heads=4,
        intermediate=688,
        max_position_embeddings=1024,
        std=0.05,
    )


def make_prompts(n: int, seed: int = 0) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [
        " ".join(rng.choice(WORDS, size=int(rng.integers(8, 120)))).capitalize() + "."
        for _ in range(n)
    ]


def run_ours(path: str, requests, batch_size: int, max_length: int, repeats: int):
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model

    gen = Generator(
        model=load_model(path, attention="auto"),
        tokenizer=AutoTokenizer.from_pretrained(path),
        max_length=max_length,
        batch_size=batch_size,
    )
    t0 = time.perf_counter()
    gen.generate_until(requests, disable_tqdm=True)  # compiles the bucket shapes
    cold = time.perf_counter() - t0
    warm = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        texts = gen.generate_until(requests, disable_tqdm=True)
        warm = min(warm, time.perf_counter() - t0)
    return texts, warm, cold, dict(gen.stats), gen.compile_count


def run_lm_eval(path: str, requests, batch_size: int, max_length: int, repeats: int):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    hf = HFLM(
        pretrained=path, dtype="float32", device="cpu", batch_size=batch_size, max_length=max_length
    )
    insts = [Instance("generate_until", {}, (c, dict(k)), i) for i, (c, k) in enumerate(requests)]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        texts = hf.generate_until(insts, disable_tqdm=True)
        best = min(best, time.perf_counter() - t0)
    return texts, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs each; the best is kept")
    args = parser.parse_args()

    import torch

    tmp = tempfile.mkdtemp(prefix="bench-generate-")
    prompts = make_prompts(args.prompts)
    path = make_model(tmp, prompts + make_prompts(200, seed=1))
    requests = [(p, {"until": ["<never>"], "max_gen_toks": args.new}) for p in prompts]

    theirs, t_hf = run_lm_eval(path, requests, args.batch_size, args.max_length, args.repeats)
    rows = [("lm-eval HF", args.batch_size, t_hf, None)]
    ours_by_bs = {}
    for bs in sorted({args.batch_size, 64}):
        texts, warm, cold, stats, compiles = run_ours(
            path, requests, bs, args.max_length, args.repeats
        )
        ours_by_bs[bs] = (texts, stats)
        rows.append((f"jaxeval (compile {cold - warm:.1f}s, {compiles} shapes)", bs, warm, stats))
    tokens = ours_by_bs[args.batch_size][1]["generated_tokens"]
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(path).vocab_size
    identical = all(t == theirs for t, _ in ours_by_bs.values())

    lines = [
        f"{args.prompts} prompts ({min(map(len, prompts))}-{max(map(len, prompts))} chars), "
        f"{args.new} new tokens each, greedy, {tokens} tokens generated; Llama hidden 256, 4 layers, "
        f"vocab {vocab}, float32; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)",
        "",
        "| implementation | batch size | wall s | generated tok/s | vs lm-eval |",
        "|---|---|---|---|---|",
    ]
    for name, bs, secs, _ in rows:
        lines.append(f"| {name} | {bs} | {secs:.2f} | {tokens / secs:.0f} | {t_hf / secs:.2f}x |")
    lines.append("")
    lines.append(f"Outputs string-identical to lm-eval: {'yes' if identical else 'NO'}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
