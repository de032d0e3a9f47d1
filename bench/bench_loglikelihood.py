"""jaxeval vs lm-eval's HF backend on the same model, data and machine, in one run.

    python bench/bench_loglikelihood.py [--quick] [--out docs/bench_loglikelihood.json]

Builds a small random Llama (width 256, 4 layers, a BPE vocabulary trained on the shared data,
max_length 2048), then for each case runs lm-eval 0.4.13's `HFLM` (float32, CPU) and `JaxLM` on the
same requests and prints requests/s, tokens/s, their ratio, jaxeval's padding efficiency (real /
computed tokens), compile count and time, the largest |loglik difference|, and MFU against this
machine's float32 matmul peak (a timed 2048^3 `jnp.dot`).

Cases: ARC-Easy multiple choice with 5-shot contexts (~200 tokens, 4 choices), LAMBADA (single
continuations), WikiText rolling perplexity on ~2k-token-plus documents.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
WIDTH, LAYERS, HEADS, FFN, VOCAB, MAX_LENGTH = 256, 4, 4, 768, 8192, 2048


def _rows(path, n, skip=0):
    with open(path) as f:
        return [json.loads(line) for _, line in zip(range(skip + n), f)][skip:]


def build_model(root: str) -> str:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from jaxeval.demo.tiny import train_tokenizer

    texts = [
        r["page"] for r in _rows(DATA / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl", 62)
    ]
    texts += [r["text"] for r in _rows(DATA / "lambada_openai/test.jsonl", 2000)]
    texts += [
        r["question"] + " " + " ".join(r["choices"]["text"])
        for r in _rows(DATA / "ai2_arc/ARC-Easy/test.jsonl", 2376)
    ]
    tok_dir = train_tokenizer(texts, os.path.join(root, "tok"), style="llama", vocab_size=VOCAB)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=WIDTH,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_LENGTH,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    path = os.path.join(root, "model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def arc_mc(n: int, shots: int = 5) -> list[tuple[str, str]]:
    """ARC-Easy 5-shot: the few-shot prefix makes ~200-token contexts shared by the 4 choices."""
    pool = _rows(DATA / "ai2_arc/ARC-Easy/validation.jsonl", 200)
    out = []
    for i, row in enumerate(_rows(DATA / "ai2_arc/ARC-Easy/test.jsonl", n)):
        shots_rows = [pool[(i * 7 + k * 13) % len(pool)] for k in range(shots)]
        prefix = ""
        for s in shots_rows:
            gold = s["choices"]["text"][s["choices"]["label"].index(s["answerKey"])]
            prefix += f"Question: {s['question']}\nAnswer: {gold}\n\n"
        ctx = prefix + f"Question: {row['question']}\nAnswer:"
        out.extend((ctx, " " + c) for c in row["choices"]["text"])
    return out


def lambada(n: int) -> list[tuple[str, str]]:
    out = []
    for row in _rows(DATA / "lambada_openai/test.jsonl", n):
        words = row["text"].split(" ")
        out.append((" ".join(words[:-1]), " " + words[-1]))
    return out


def wikitext(n: int) -> list[tuple[str]]:
    pages = [
        r["page"] for r in _rows(DATA / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl", 62)
    ]
    pages = [p for p in pages if 8000 <= len(p) <= 20000]
    return [(p,) for p in pages[:n]]


def matmul_peak() -> float:
    """FLOP/s of a float32 2048^3 matmul on this machine: the best of jnp.dot and torch.mm, 5 runs each."""
    import jax
    import jax.numpy as jnp
    import torch

    n = 2048
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(5))
    x = torch.ones(n, n)
    best = min([best] + [_timed(lambda: torch.mm(x, x)) for _ in range(5)])
    return 2 * n**3 / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def flops_per_token(spec, context: int) -> float:
    """Forward FLOPs of one token in the body (matmuls + attention over `context` keys), no LM head."""
    d, f, h, e, g = (
        spec.hidden_size,
        spec.intermediate_size,
        spec.num_heads,
        spec.head_dim,
        spec.num_kv_heads,
    )
    proj = 2 * d * (h * e + 2 * g * e) + 2 * h * e * d + 2 * 3 * d * f
    attn = 2 * 2 * h * e * context
    return spec.num_layers * (proj + attn)


def run_case(name, kind, args, hf, lm, peak, reps=2):
    from lm_eval.api.instance import Instance as LI

    from jaxeval.api.instance import Instance

    spec = lm.loaded.spec
    vocab, width = spec.vocab_size, spec.hidden_size
    if kind == "loglikelihood":
        enc = lm.encoder.encode_requests(args)
        windows = [((c + x)[-(lm.max_length + 1) :][:-1], len(x)) for c, x in enc]
    else:
        windows = []
        for (text,) in args:
            for c, x in lm._rolling(lm.tok_encode(text)):
                windows.append(((c + x)[-(lm.max_length + 1) :][:-1], len(x)))
    tokens = sum(len(w) for w, _ in windows)  # lm-eval's model input tokens, the common unit
    method = "loglikelihood" if kind == "loglikelihood" else "loglikelihood_rolling"

    # Interleaved repetitions, best time of each: the machine is shared and noisy. jaxeval's buckets
    # are compiled before (warm-up, reported separately).
    lm.scorer.warmup()
    out: dict[str, list] = {}
    times: dict[str, list[float]] = {"hf": [], "jax": []}

    def go(who):
        if who == "hf":
            return getattr(hf, method)([LI(kind, {}, a, 0) for a in args], disable_tqdm=True)
        return getattr(lm, method)([Instance(kind, {}, a, 0) for a in args], disable_tqdm=True)

    for _ in range(reps):
        for who in ("hf", "jax"):
            start = time.perf_counter()
            out[who] = go(who)
            times[who].append(time.perf_counter() - start)
    t_hf, t_jx = min(times["hf"]), min(times["jax"])
    ref, ours = out["hf"], out["jax"]
    if kind == "loglikelihood":
        delta = max(abs(a[0] - b[0]) for a, b in zip(ours, ref))
        greedy_mismatch = sum(a[1] != b[1] for a, b in zip(ours, ref))
    else:
        delta = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(ours, ref))
        greedy_mismatch = 0
    plan = lm.last_plan
    # FLOPs each system executes. lm-eval: batches of 8 sorted by length, padded to the batch max,
    # head over every position (V*D per token). jaxeval: B*T tokens per batch, head at B*K points.
    # Attention is counted causally (average context T/2) for both.
    lens = sorted((len(w) for w, _ in windows), reverse=True)
    hf_flops = 0.0
    for i in range(0, len(lens), hf.batch_size):
        chunk = lens[i : i + hf.batch_size]
        hf_flops += (
            len(chunk) * chunk[0] * (flops_per_token(spec, chunk[0] / 2) + 2 * vocab * width)
        )
    jx_flops = sum(
        b.bucket.rows * b.bucket.length * flops_per_token(spec, b.bucket.length / 2)
        + b.bucket.rows * b.bucket.points * 2 * vocab * width
        for b in plan.batches
    )
    return {
        "case": name,
        "requests": len(args),
        "lm_eval_requests": len(windows),
        "tokens": tokens,
        "hf_s": t_hf,
        "hf_s_all": times["hf"],
        "jax_s_all": times["jax"],
        "jax_s": t_jx,
        "hf_req_s": len(args) / t_hf,
        "jax_req_s": len(args) / t_jx,
        "hf_tok_s": tokens / t_hf,
        "jax_tok_s": tokens / t_jx,
        "speedup": t_hf / t_jx,
        "padding_efficiency": plan.efficiency,
        "real_tokens": plan.real_tokens,
        "computed_tokens": plan.computed_tokens,
        "hf_mfu": hf_flops / t_hf / peak,
        "jax_mfu": jx_flops / t_jx / peak,
        "max_delta": delta,
        "greedy_mismatch": greedy_mismatch,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    p.add_argument("--hf-batch-size", type=int, default=8)
    p.add_argument("--token-budget", type=int, default=2048)
    p.add_argument(
        "--buckets", default="512,1024,2048", help="bucket row lengths (each with K = T/8 and T)"
    )
    p.add_argument(
        "--reps", type=int, default=2, help="interleaved repetitions; the best time counts"
    )
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument(
        "--cases", default="mc,lambada,rolling", help="comma-separated subset of mc,lambada,rolling"
    )
    a = p.parse_args(argv)
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    logging.getLogger("jaxeval").setLevel(logging.ERROR)
    import jax
    import torch

    from jaxeval.lm.jax_lm import JaxLM

    n_mc, n_lam, n_doc = (20, 40, 2) if a.quick else (100, 400, 6)
    root = tempfile.mkdtemp(prefix="jaxeval-bench-")
    t = time.perf_counter()
    path = build_model(root)
    print(f"model built in {time.perf_counter() - t:.1f}s at {path}", file=sys.stderr)
    peak = matmul_peak()
    from lm_eval.models.huggingface import HFLM

    hf = HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=a.hf_batch_size)
    t = time.perf_counter()
    lm = JaxLM(
        pretrained=path,
        dtype="float32",
        mesh="single",
        token_budget=a.token_budget,
        buckets=a.buckets,
    )
    lm.scorer.warmup()
    compile_s = time.perf_counter() - t
    n_params = lm.loaded.spec.param_count(lm.loaded.params)
    cases = {
        "mc": ("multiple choice (ARC-Easy 5-shot, 4 choices)", "loglikelihood", arc_mc),
        "lambada": ("LAMBADA (single continuation)", "loglikelihood", lambada),
        "rolling": ("rolling perplexity (WikiText pages)", "loglikelihood_rolling", wikitext),
    }
    sizes = {"mc": n_mc, "lambada": n_lam, "rolling": n_doc}
    unknown = set(a.cases.split(",")) - set(cases)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}; choose from {sorted(cases)}")
    cases = [
        (cases[c][0], cases[c][1], cases[c][2](sizes[c])) for c in cases if c in a.cases.split(",")
    ]
    results = [run_case(name, kind, args, hf, lm, peak, a.reps) for name, kind, args in cases]
    header = {
        "machine": f"{os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}, jax {jax.__version__} on {jax.devices()[0].platform}",
        "model": f"random Llama, width {WIDTH}, {LAYERS} layers, vocab {lm.loaded.spec.vocab_size}, {n_params / 1e6:.1f}M params, max_length {lm.max_length}",
        "matmul_peak_gflops": peak / 1e9,
        "hf_batch_size": a.hf_batch_size,
        "token_budget": lm.token_budget,
        "buckets": [(b.length, b.points, b.rows) for b in lm.buckets],
        "compile_count": lm.scorer.compile_count,
        "compile_s": compile_s,
    }
    print(json.dumps(header, indent=1))
    cols = (
        "case",
        "requests",
        "tokens",
        "hf_req_s",
        "jax_req_s",
        "hf_tok_s",
        "jax_tok_s",
        "speedup",
        "padding_efficiency",
        "hf_mfu",
        "jax_mfu",
        "max_delta",
        "greedy_mismatch",
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
