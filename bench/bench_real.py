"""`lm_eval` vs `jaxeval` command lines at real model shapes, whole processes, one run, interleaved.

    python bench/bench_real.py                          # SmolLM2-135M shapes, every case
    python bench/bench_real.py --cases arc0,lambada --model smollm2-135m --out bench.json

Each case runs `lm_eval ARGS` once, then `jaxeval ARGS` twice with the same ARGS: first with an
empty persistent compilation cache (cold), then again (warm: every executable from disk). ARGS are
lm-eval's usual flags: `--model hf --model_args pretrained=DIR,dtype=float32 --device cpu
--batch_size 8 --tasks T --include_path TASKS --limit N --log_samples --output_path OUT`.

Tasks are local copies of lm-eval's YAMLs reading ../shared/data (`dataset_path: json`), so both
tools run offline on the same rows. Reported per run: wall seconds, and for jaxeval the padding
efficiency, compilations / cache hits / compile seconds from the results' `scoring_stats`.
MFU = FLOPs each tool executes / its wall time / the float32 matmul peak measured at the start of
the run (best of `torch.mm` 2048^3). lm-eval's FLOPs: every request's tokens through body and head
(its padding not counted, so its MFU is an upper bound); jaxeval's: every computed row token
through the body and every score point through the head. Attention FLOPs use the average causal
context of each row.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from real_shapes import DATA, SHAPES, build  # noqa: E402

ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "LMEVAL_DISABLE_MULTIPROC": "1",
    "DISABLE_MULTIPROC": "1",
}

ARC = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/ai2_arc/ARC-Easy/test.jsonl
    validation: {data}/ai2_arc/ARC-Easy/validation.jsonl
output_type: multiple_choice
test_split: test
fewshot_split: validation
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
LAMBADA = """task: lambada_bench
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/lambada_openai/test.jsonl
output_type: loglikelihood
test_split: test
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' '+text.split(' ')[-1]}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
WIKITEXT = """task: wikitext_bench
dataset_path: json
dataset_kwargs:
  data_files:
    test: {pages}
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: "{{{{page}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""

# name -> (task, extra flags)
CASES = {
    "arc0": ("arc_easy_bench", ["--limit", "100"]),
    "arc0_full": ("arc_easy_bench", []),
    "arc25": ("arc_easy_bench", ["--num_fewshot", "25", "--limit", "100"]),
    "arc25_10": ("arc_easy_bench", ["--num_fewshot", "25", "--limit", "10"]),
    "lambada": ("lambada_bench", ["--limit", "100"]),
    "wikitext": ("wikitext_bench", []),
}


def write_tasks(root: pathlib.Path, pages: int) -> pathlib.Path:
    """The three task YAMLs plus a WikiText file of the `pages` longest test pages."""
    tasks = root / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "arc_easy_bench.yaml").write_text(ARC.format(name="arc_easy_bench", data=DATA))
    (tasks / "lambada_bench.yaml").write_text(LAMBADA.format(data=DATA))
    src = DATA / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl"
    rows = [json.loads(line) for line in open(src)]
    rows = sorted(rows, key=lambda r: -len(r["page"]))[:pages]
    page_file = root / "wikitext_pages.jsonl"
    page_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tasks / "wikitext_bench.yaml").write_text(WIKITEXT.format(pages=page_file))
    return tasks


def matmul_peak() -> float:
    """float32 FLOP/s of `torch.mm` at 2048^3, best of 5 (MFU's denominator for both tools)."""
    import torch

    n = 2048
    x = torch.ones(n, n)
    torch.mm(x, x)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(x, x)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def xla_matmul_peak() -> float:
    """The same for XLA:CPU's `jnp.dot` (what jaxeval's kernels can reach), in a subprocess."""
    code = (
        "import time, jax, jax.numpy as jnp\n"
        "x = jnp.ones((2048, 2048)); f = jax.jit(lambda a: a @ a)\n"
        "f(x).block_until_ready(); best = 1e9\n"
        "for _ in range(5):\n"
        "    t = time.perf_counter(); f(x).block_until_ready(); best = min(best, time.perf_counter() - t)\n"
        "print(2 * 2048**3 / best)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def flops_per_token(shape: dict, context: float) -> tuple[float, float]:
    """(body FLOPs per token at an average attention context, head FLOPs per scored token)."""
    d, f = shape["hidden_size"], shape["intermediate_size"]
    h, g = shape["num_attention_heads"], shape["num_key_value_heads"]
    e = shape.get("head_dim", d // h)
    if "num_experts" in shape:  # a token runs its K experts (and the router), not all X
        f = shape["num_experts_per_tok"] * shape["moe_intermediate_size"]
        proj = 2 * d * shape["num_experts"]
    else:
        proj = 0
    proj += 2 * d * (h * e + 2 * g * e) + 2 * h * e * d + 2 * 3 * d * f
    attn = 2 * 2 * h * e * context
    return shape["num_hidden_layers"] * (proj + attn), 2 * d * shape["vocab_size"]


def run(cmd: list[str], env: dict, log: pathlib.Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}); see {log}")
    return wall


def results_of(out: pathlib.Path) -> dict:
    files = sorted(glob.glob(str(out / "**" / "results*.json"), recursive=True))
    return json.load(open(files[-1])) if files else {}


def request_tokens(out: pathlib.Path, tokenizer) -> list[int]:
    """Tokens of every request lm-eval ran (from its samples file; rolling: the whole document)."""
    texts = []
    for path in glob.glob(str(out / "**" / "samples_*.jsonl"), recursive=True):
        for line in open(path):
            for args in json.loads(line)["arguments"].values():
                texts.append(args["arg_0"] + args.get("arg_1", ""))
    ids = tokenizer(texts)["input_ids"] if texts else []
    return [len(x) for x in ids]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", choices=sorted(SHAPES))
    p.add_argument("--cases", default="arc0,lambada,wikitext,arc25")
    p.add_argument("--pages", type=int, default=2, help="WikiText pages (the longest ones)")
    p.add_argument("--batch_size", default="8")
    p.add_argument("--out", default=None)
    p.add_argument("--skip_lm_eval", action="store_true")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer

    model = build(args.model)
    shape = SHAPES[args.model]
    tok = AutoTokenizer.from_pretrained(model)
    root = pathlib.Path(tempfile.mkdtemp(prefix="jaxeval-bench-"))
    tasks = write_tasks(root, args.pages)
    xla_cache = root / "xla"
    peak, xla_peak = matmul_peak(), xla_matmul_peak()
    print(
        f"matmul peak: torch {peak / 1e9:.0f}, XLA {xla_peak / 1e9:.0f} GFLOP/s;"
        f" load {os.getloadavg()}",
        flush=True,
    )
    venv_bin = pathlib.Path(sys.executable).parent
    env = {**os.environ, **ENV, "JAXEVAL_COMPILATION_CACHE": str(xla_cache)}
    rows = []
    for case in args.cases.split(","):
        task, extra = CASES[case]
        common = [
            "--model", "hf",
            "--model_args", f"pretrained={model},dtype=float32",
            "--device", "cpu",
            "--batch_size", args.batch_size,
            "--tasks", task,
            "--include_path", str(tasks),
            "--log_samples",
            *extra,
        ]  # fmt: skip
        row = {"case": case, "task": task, "args": " ".join(extra), "load": os.getloadavg()}
        runs = [("lm_eval", str(venv_bin / "lm_eval"))] if not args.skip_lm_eval else []
        runs += [("jaxeval_cold", str(venv_bin / "jaxeval")), ("jaxeval_warm", None)]
        for who, exe in runs:
            out = root / f"{case}_{who}"
            if who == "jaxeval_cold" and xla_cache.exists():
                shutil.rmtree(xla_cache)
            exe = exe or str(venv_bin / "jaxeval")
            cmd = [exe, *common, "--output_path", str(out)]
            row[who] = run(cmd, env, root / f"{case}_{who}.log")
            if who.startswith("jaxeval"):
                config = results_of(out).get("config", {})
                row[who + "_stats"] = config.get("scoring_stats", {})
                row[who + "_timing"] = config.get("timing", {})
            else:
                row["lm_eval_tokens"] = request_tokens(out, tok)
            print(f"  {case} {who}: {row[who]:.1f} s", flush=True)
        lens = row.get("lm_eval_tokens", [])
        if lens:
            ml = shape["max_position_embeddings"]
            ctx = sum(n * min(n, ml) / 2 for n in lens) / max(1, sum(lens))  # windows of <= ml
            body, head = flops_per_token(shape, ctx)
            row["lm_eval_mfu"] = sum(lens) * (body + head) / row["lm_eval"] / peak
            row["ratio_cold"] = row["lm_eval"] / row["jaxeval_cold"]
            row["ratio_warm"] = row["lm_eval"] / row["jaxeval_warm"]
        st = row["jaxeval_warm_stats"]
        if st:  # rows of T: causal context T / 2 on average (rolling: max_length windows)
            body, head = flops_per_token(shape, 4096 if case == "wikitext" else 128)
            flops = st["computed_tokens"] * body + st.get("computed_points", 0) * head
            row["jaxeval_mfu_warm"] = flops / row["jaxeval_warm"] / peak
        row["lm_eval_tokens"] = sum(lens)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if "stats" not in k}), flush=True)
        if args.out:  # after every case, so a long run keeps what it measured
            partial = {"model": args.model, "peak_flops": peak, "rows": rows}
            pathlib.Path(args.out).write_text(json.dumps(partial, indent=1))
    report = {"model": args.model, "peak_flops": peak, "xla_peak_flops": xla_peak, "rows": rows}
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    print_table(report)
    shutil.rmtree(root, ignore_errors=True)
    return 0


def print_table(report: dict) -> None:
    print(
        "| case | lm-eval s | jaxeval cold s | jaxeval warm s | ratio cold | ratio warm | "
        "efficiency | compilations cold / warm | cache hits warm | compile s cold / warm | "
        "lm-eval MFU | jaxeval MFU (warm, whole process) | warm: load / evaluate / first batch"
        " starts after load s |"
    )
    print("|" + "---|" * 13)
    for r in report["rows"]:
        c, w = r.get("jaxeval_cold_stats", {}), r.get("jaxeval_warm_stats", {})
        print(
            f"| {r['case']} ({r['args']}) | {r.get('lm_eval', float('nan')):.1f} | "
            f"{r['jaxeval_cold']:.1f} | {r['jaxeval_warm']:.1f} | "
            f"{r.get('ratio_cold', float('nan')):.2f}x | {r.get('ratio_warm', float('nan')):.2f}x | "
            f"{w.get('efficiency', float('nan')):.3f} | "
            f"{c.get('compilations', '?')} / {w.get('compilations', '?')} | "
            f"{w.get('cache_hits', '?')} | "
            f"{c.get('compile_s', float('nan')):.1f} / {w.get('compile_s', float('nan')):.1f} | "
            f"{r.get('lm_eval_mfu', float('nan')):.2f} | {r.get('jaxeval_mfu_warm', float('nan')):.2f} | "
            f"{_timing(r.get('jaxeval_warm_timing', {}))} |"
        )


def _timing(t: dict) -> str:
    keys = ("model_s", "evaluate_s", "first_batch_start_after_model_s")
    return " / ".join(f"{t[k]:.1f}" if k in t else "?" for k in keys)


if __name__ == "__main__":
    raise SystemExit(main())
