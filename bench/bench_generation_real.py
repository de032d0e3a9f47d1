"""Generation at real shapes: SmolLM2-135M-Instruct (the demo's GGUF), whole processes side by side.

    python bench/bench_generation_real.py [--cases gsm8k5,cot8,long] [--limit 8] [--out bench.json]

Per case it runs `lm_eval` and `jaxeval` with the same command line (`--model hf --model_args
pretrained=DIR,gguf_file=NAME,dtype=float32 --device cpu --batch_size 8 --tasks T --include_path
TASKS --limit N --log_samples`), times each whole process (jaxeval twice: with an empty compilation
cache, then warm), checks the generated strings are identical and counts generated tokens (the raw
responses, re-tokenized). Then, in this process,
jaxeval's generation alone on the same requests: the static batches (`continuous=False`) against
continuous batching with shared-prefix prefill, warm (compiled once, timed second). Finally the
decode memory-bandwidth bound: bytes read per generated token (weights / rows + the row's KV) over
a measured copy bandwidth.

Beside the whole processes, the generation phase alone: each process's own `Running generate_until
requests` progress bar (whole seconds), so start-up (imports, model load, task building) is out
of the ratio; and the prefill floor, the prompts' forward FLOPs (2 x non-embedding parameters per
token + the causal attention's two matmuls) at XLA's float32 matmul peak measured in this run.
The generation-phase ratio cannot exceed lm-eval's generation seconds over that floor.

Cases (the demo's bundled GSM8K rows, `tasks/demo/data/gsm8k`; its 60 train rows serve as both the
documents and the few-shot pool):
    gsm8k5  lm-eval's gsm8k.yaml, 5-shot (default sampler: per-document random few-shot)
    cot8    lm-eval's gsm8k-cot.yaml, 8-shot chain of thought (a fixed few-shot block: first_n)
    long    0-shot "Question: ...\\nAnswer:", max_gen_toks 640, stopped only by EOS
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_decode_step import bandwidth  # noqa: E402
from bench_real import xla_matmul_peak  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = REPO / "tasks" / "demo" / "data" / "gsm8k" / "train.jsonl"
ENV = {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "JAX_PLATFORMS": "cpu",
}


def model_file() -> pathlib.Path:
    return pathlib.Path.home() / ".cache/jaxeval/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def write_tasks(root: pathlib.Path) -> dict[str, tuple[str, int]]:
    """Task YAMLs reading the bundled rows; case -> (task name, num_fewshot)."""
    data = f"dataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    train: {DATA}\n    test: {DATA}\n"
    base = (REPO / "tasks" / "gsm8k" / "gsm8k.yaml").read_text()
    cot = (REPO / "tasks" / "gsm8k" / "gsm8k-cot.yaml").read_text()

    def strip(text: str) -> str:
        keep, in_tag = [], False
        for line in text.splitlines():
            if in_tag and line.lstrip().startswith("- "):
                continue
            in_tag = line.startswith("tag:")
            if line.startswith(("dataset_path", "dataset_name", "tag:", "task:")):
                continue
            keep.append(line)
        return "\n".join(keep) + "\n"

    (root / "bench_gsm8k5.yaml").write_text("task: bench_gsm8k5\n" + data + strip(base))
    (root / "bench_cot8.yaml").write_text("task: bench_cot8\n" + data + strip(cot))
    long = strip(base).replace(
        '    - "Question:"\n    - "</s>"\n    - "<|im_end|>"\n', '    - "<|never|>"\n'
    )
    long = long.replace("do_sample: false", "do_sample: false\n  max_gen_toks: 640")
    (root / "bench_long.yaml").write_text("task: bench_long\n" + data + long)
    return {"gsm8k5": ("bench_gsm8k5", 5), "cot8": ("bench_cot8", 8), "long": ("bench_long", 0)}


def run(cmd: list[str], env: dict, log: pathlib.Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}); see {log}")
    return time.perf_counter() - start


def samples(out: pathlib.Path) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(str(out / "**" / "samples_*.jsonl"), recursive=True)):
        rows += [json.loads(x) for x in open(path)]
    # lm-eval logs one row per document *and filter* (GSM8K: strict-match, flexible-extract):
    # keep one per document, so requests and generated tokens are not counted twice
    first = {}
    for r in rows:
        first.setdefault(r["doc_id"], r)
    return [first[k] for k in sorted(first)]


def generation_seconds(log: pathlib.Path) -> float | None:
    """The generate_until phase's elapsed time from a process's last progress bar (tqdm, whole
    seconds; lm-eval and jaxeval print the same bar), or None when the log has none."""
    text = log.read_text(errors="replace").replace("\r", "\n")
    found = re.findall(
        r"Running generate_until requests: 100%\|[^|]*\|\s*\d+/\d+ \[(\d+):(\d+)<", text
    )
    if not found:
        return None
    minutes, seconds = found[-1]
    return 60.0 * int(minutes) + int(seconds)


def prefill_flops(spec: Any, n_params: int, prompt_lengths: list[int]) -> float:
    """Forward FLOPs of prefilling these prompts (no logits: a prompt needs only its last one):
    2 x the non-embedding parameters per token, plus q.k and p.v over the causal half."""
    embed = spec.vocab_size * spec.hidden_size * (1 if spec.tie_embeddings else 2)
    dense = 2 * (n_params - embed)
    width = spec.num_heads * spec.head_dim
    return float(sum(dense * n + 2 * spec.num_layers * width * n * n for n in prompt_lengths))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="gsm8k5,cot8,long")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--long_limit", type=int, default=4)
    p.add_argument("--batch_size", default="8")
    p.add_argument("--out", default=None)
    p.add_argument("--skip_lm_eval", action="store_true")
    p.add_argument(
        "--skip_in_process", action="store_true", help="whole processes and the bound only"
    )
    args = p.parse_args(argv)

    gguf = model_file()
    if not gguf.exists():
        raise SystemExit(f"{gguf} missing: run `python -m jaxeval.demo.fetch` once")
    root = pathlib.Path(tempfile.mkdtemp(prefix="jaxeval-genbench-"))
    cases = write_tasks(root)
    venv_bin = pathlib.Path(sys.executable).parent
    env = {**os.environ, **ENV, "JAXEVAL_COMPILATION_CACHE": str(root / "xla")}
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bw = bandwidth()
    peak = xla_matmul_peak()
    print(
        f"copy bandwidth {bw / 1e9:.1f} GB/s; matmul peak {peak / 1e9:.0f} GFLOP/s;"
        f" load {os.getloadavg()}",
        flush=True,
    )
    table = []
    for case in args.cases.split(","):
        task, shots = cases[case]
        limit = args.long_limit if case == "long" else args.limit
        common = [
            "--model", "hf",
            "--model_args", f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32",
            "--device", "cpu",
            "--batch_size", args.batch_size,
            "--tasks", task,
            "--num_fewshot", str(shots),
            "--include_path", str(root),
            "--limit", str(limit),
            "--log_samples",
        ]  # fmt: skip
        row = {"case": case, "docs": limit, "load_before": os.getloadavg()[0]}
        texts = {}
        # jaxeval twice: cold (empty compilation cache), then warm (every executable from disk)
        who_list = ([] if args.skip_lm_eval else ["lm_eval"]) + ["jaxeval", "jaxeval_warm"]
        for who in who_list:
            out = root / f"{case}_{who}"
            row[f"{who}_s"] = run(
                [str(venv_bin / who.removesuffix("_warm")), *common, "--output_path", str(out)],
                env,
                root / f"{case}_{who}.log",
            )
            row[f"{who}_gen_s"] = generation_seconds(root / f"{case}_{who}.log")
            rows = samples(out)
            texts[who] = [r["resps"][0][0] for r in rows]
            row[f"{who}_tokens"] = sum(len(x) for x in tok(texts[who])["input_ids"])
            row["requests"] = [
                (r["arguments"]["gen_args_0"]["arg_0"], r["arguments"]["gen_args_0"]["arg_1"])
                for r in rows
            ]
            print(case, who, f"{row[f'{who}_s']:.1f} s", row[f"{who}_tokens"], "tokens", flush=True)
        row["identical_warm"] = texts["jaxeval_warm"] == texts["jaxeval"]
        if "lm_eval" in texts:
            row["identical"] = texts["lm_eval"] == texts["jaxeval"]
        row["load_after"] = os.getloadavg()[0]
        table.append(row)

    # ---- jaxeval generation alone: static vs continuous (+ shared prefix) ----------------------
    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model

    model = load_model(str(gguf), dtype="float32", attention="auto")
    spec = model.spec
    for row in table:
        requests = [(c, dict(k)) for c, k in row.pop("requests")]
        res = {}
        configs = (
            ("static", dict(continuous=False)),
            ("continuous", dict(continuous=True, min_prefix=0)),
            ("continuous+prefix", dict(continuous=True)),
        )
        for name, kw in configs[2:] if args.skip_in_process else configs:
            gen = Generator(
                model=model, tokenizer=tok, max_length=8192, batch_size=int(args.batch_size), **kw
            )
            t = time.perf_counter()
            first = gen.generate_until(requests, disable_tqdm=True)
            cold = time.perf_counter() - t
            t = time.perf_counter()
            again = gen.generate_until(requests, disable_tqdm=True)
            warm = time.perf_counter() - t
            assert again == first
            res[name] = {
                "cold_s": cold,
                "warm_s": warm,
                "compile_s": gen.compile_seconds,
                "compiles": gen.compile_count,
                "texts": first,
                **{
                    k: gen.stats.get(k)
                    for k in (
                        "generated_tokens",
                        "decode_steps",
                        "prompt_tokens",
                        "prefill_tokens",
                        "prefix_tokens",
                        "batches",
                    )
                },
            }
            print(
                row["case"], name, {k: v for k, v in res[name].items() if k != "texts"}, flush=True
            )
        texts = [json.dumps(v["texts"]) for v in res.values()]
        row["identical_in_process"] = len(set(texts)) == 1 if len(texts) > 1 else None
        for v in res.values():
            v.pop("texts")
        row["in_process"] = res
        # decode bandwidth bound: weights once per step for B rows + each row's KV at its mean context
        n_params = spec.param_count(model.params) if hasattr(spec, "param_count") else 0
        kv_per_slot = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4
        ref = res.get("continuous") or res["continuous+prefix"]
        prompt = ref["prompt_tokens"] / max(1, len(requests))
        gen_tok = ref["generated_tokens"] / max(1, len(requests))
        ctx = prompt + gen_tok / 2
        rows = int(args.batch_size)
        per_token = 4 * n_params / rows + kv_per_slot * ctx
        row["bound"] = {
            "bytes_per_token": per_token,
            "bandwidth": bw,
            "tok_s_bound": bw / per_token,
            "mean_context": ctx,
            "params": n_params,
        }
        print(row["case"], row["bound"], flush=True)
        # the prefill floor: the prompts' forward FLOPs at the matmul peak
        lengths = [len(x) for x in tok([c for c, _ in requests])["input_ids"]]
        flops = prefill_flops(spec, n_params, lengths)
        row["prefill"] = {"flops": flops, "peak": peak, "floor_s": flops / peak}
        print(row["case"], row["prefill"], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1, default=str)
    print_table(table)
    return 0


def print_table(table: list[dict]) -> None:
    print(
        "| case | generated tokens | lm-eval s | jaxeval cold / warm s | whole-process ratio cold /"
        " warm | strings identical | tok/s whole process, lm-eval / jaxeval warm |"
        " jaxeval in process warm s (tok/s) | generation phase lm-eval / jaxeval warm s (ratio) |"
        " prefill floor s (ratio ceiling) |"
    )
    print("|" + "---|" * 10)
    for r in table:
        n = r.get("jaxeval_tokens", 0)
        lm = r.get("lm_eval_s") or float("nan")
        jx, jw = r["jaxeval_s"], r["jaxeval_warm_s"]
        warm = r.get("in_process", {}).get("continuous+prefix", {}).get("warm_s")
        print(
            f"| {r['case']} | {n} | {lm:.1f} | {jx:.1f} / {jw:.1f} | {lm / jx:.2f}x / {lm / jw:.2f}x"
            f" | {r.get('identical', '?')} | {n / lm:.1f} / {n / jw:.1f} | "
            + (f"{warm:.1f} ({n / warm:.1f}) |" if warm else "- |")
            + _phase(r)
        )


def _phase(r: dict) -> str:
    """The generation phase columns: both processes' own seconds, and the prefill floor."""
    lm, jw = r.get("lm_eval_gen_s"), r.get("jaxeval_warm_gen_s")
    floor = r.get("prefill", {}).get("floor_s")
    phase = f" {lm:.0f} / {jw:.0f} ({lm / jw:.2f}x) |" if lm and jw else " - |"
    ceiling = f" {floor:.1f} ({lm / floor:.1f}x) |" if lm and floor else " - |"
    return phase + ceiling


if __name__ == "__main__":
    raise SystemExit(main())
