"""jaxeval's whole-process wall time against lm-eval 0.4.13's bare harness and its HF backend.

    python bench/bench_host.py                                   # all four workloads
    python bench/bench_host.py --workloads mmlu,gsm8k --limit 20 --json host.json
    python bench/bench_host.py --tokenizer tiny --skip-hf        # 8,192-token head

For each workload these processes run one after the other on the same machine, same data, same
`--tasks`, `--data_dir`, `--output_path` (a temp dir) and extra flags, no `--log_samples`:

    dummy    lm_eval --model dummy                     lm-eval's task, request and metric
                                                       machinery with no model (default env:
                                                       its bootstrap's multiprocessing pool on)
    hf       lm_eval --model hf --model_args pretrained=M,dtype=float32 --device cpu --batch_size 8
    cold     jaxeval run --model jax --model_args pretrained=M      JAXEVAL_CACHE an empty dir
    warm     the same again, same JAXEVAL_CACHE
    one_core the warm run again, pinned to one CPU (sched_setaffinity): the host rate of one core

lm-eval runs through `bench/lm_eval_local.py`, which reads the hub datasets from `--data_dir`
(no YAML edits). Both tools share one `datasets` cache (HF_DATASETS_CACHE under the temp dir),
filled before timing by an untimed `--model dummy --limit 1` run, so neither pays the Arrow
conversion. M is a random 2-layer, 64-wide Llama (`jaxeval.demo.tiny`) with SmolLM2's 49,152-token
tokenizer (`--tokenizer smollm2`, the default) or an 8,192-token BPE trained on the workloads'
texts (`--tokenizer tiny`): the model costs almost nothing, so the wall time is the harness.

Workloads (a, b, c, d or by name): arc_lambada (arc_easy 2,376 + lambada_openai 5,153 docs), mmlu
(the group over 57 subjects x 10 test rows, 5-shot from dev), gsm8k (1,319 docs, 5-shot,
`--gen_kwargs max_gen_toks=32`), hellaswag (500 docs). Printed: wall seconds and ratios, whether
jaxeval's metrics and stderrs equal lm-eval HF's (max |difference|), and the warm run's phase
table from its results' `timing` block with host seconds per million scored tokens,
(wall - device - compile) / scored_tokens x 1e6, for the warm run and the one-core run, beside a
TPU device figure for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from host_bench_setup import (  # noqa: E402
    WORKLOADS,
    build_model,
    data_dir_for,
    metric_diff,
    parse_workloads,
    results_of,
    tpu_device_s_per_mtok,
)

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# Cache locations that would override JAXEVAL_CACHE for one kind of cache.
CACHE_OVERRIDES = (
    "JAXEVAL_COMPILATION_CACHE",
    "JAXEVAL_CACHE_PATH",
    "JAXEVAL_INDEX_CACHE",
    "JAX_COMPILATION_CACHE_DIR",
)
RUNS = ("dummy", "hf", "cold", "warm", "one_core")
JAXEVAL_RUNS = ("cold", "warm", "one_core")
WRAPPER = str(pathlib.Path(__file__).resolve().parent / "lm_eval_local.py")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("lm_eval", "jax", "torch", "transformers", "datasets"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} -")
    return ", ".join(out)


def commands(model: str, common: list[str]) -> dict[str, list[str]]:
    """The four command lines of one workload, without `--output_path`."""
    py, jaxeval = sys.executable, str(pathlib.Path(sys.executable).parent / "jaxeval")
    hf_args = ["--model_args", f"pretrained={model},dtype=float32", "--device", "cpu"]
    jax_cmd = [jaxeval, "run", "--model", "jax", "--model_args", f"pretrained={model}", *common]
    return {
        "dummy": [py, WRAPPER, "run", "--model", "dummy", *common],
        "hf": [py, WRAPPER, "run", "--model", "hf", *hf_args, "--batch_size", "8", *common],
        "cold": jax_cmd,
        "warm": jax_cmd,
        "one_core": jax_cmd,
    }


def count_files(folder: pathlib.Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def one_core() -> None:
    """Pins the process (and its threads) to the first CPU it may use."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_one(
    cmd: list[str], env: dict, log: pathlib.Path, *, pinned: bool = False
) -> tuple[float, int]:
    """(wall seconds, exit status); stdout and stderr go to `log`; `pinned`: on one core."""
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(
            cmd,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            preexec_fn=one_core if pinned else None,
        )
    return time.perf_counter() - start, proc.returncode


def tail(log: pathlib.Path, n: int = 15) -> str:
    lines = log.read_text(errors="replace").splitlines()[-n:]
    return "\n".join("    " + line for line in lines)


def timing_block(results: dict) -> dict:
    """jaxeval's top-level `timing` block ({} before it existed or when it has no phases)."""
    block = results.get("timing") or {}
    return block if isinstance(block, dict) and "phases_s" in block else {}


def host_seconds(wall: float | None, timing: dict) -> float | None:
    """A process's wall time less its device and compile phases (the model's own time taken out)."""
    if wall is None or not timing:
        return None
    phases = timing.get("phases_s", {})
    return wall - phases.get("device", 0.0) - phases.get("compile", 0.0)


def host_s_per_mtok(wall: float, timing: dict) -> float | None:
    """(wall - device - compile) / scored_tokens x 1e6, or None without the figures."""
    tokens = timing.get("scored_tokens") or 0
    host = host_seconds(wall, timing)
    return None if not tokens or host is None else host / tokens * 1e6


def run_workload(name: str, args, root: pathlib.Path, model: str, base_env: dict) -> dict:
    w = WORKLOADS[name]
    data_dir = data_dir_for(w, root)
    common = ["--tasks", w.tasks, "--data_dir", str(data_dir), *w.extra]
    if args.limit is not None:
        common += ["--limit", str(args.limit)]
    cmds = commands(model, common)
    row: dict = {"workload": name, "flags": " ".join(common), "load": os.getloadavg()}
    prime_log = root / f"{name}_prime.log"
    prime = [*cmds["dummy"], "--limit", "1", "--output_path", str(root / f"{name}_prime")]
    wall, rc = run_one(prime, base_env, prime_log)
    if rc:
        print(f"  {name}: lm-eval could not read the data (exit {rc}):\n{tail(prime_log)}")
        row["error"] = f"prime exit {rc}"
        return row
    print(f"  {name}: datasets cache filled ({wall:.1f} s, untimed)", flush=True)
    jax_cache = root / f"jaxeval_cache_{name}"
    shutil.rmtree(jax_cache, ignore_errors=True)
    jax_cache.mkdir()
    hf_cache = pathlib.Path(base_env["HF_DATASETS_CACHE"])
    results = {}
    for who in RUNS:
        if who == "hf" and args.skip_hf:
            continue
        out, log = root / f"{name}_{who}", root / f"{name}_{who}.log"
        env = dict(base_env, JAXEVAL_CACHE=str(jax_cache)) if who in JAXEVAL_RUNS else base_env
        before = count_files(hf_cache)
        pinned = who == "one_core"
        wall, rc = run_one([*cmds[who], "--output_path", str(out)], env, log, pinned=pinned)
        new_files = count_files(hf_cache) - before
        if rc:
            print(f"  {name} {who}: exit {rc} after {wall:.1f} s:\n{tail(log)}", flush=True)
            row[f"{who}_error"] = f"exit {rc}"
            continue
        row[who] = wall
        results[who] = results_of(out)
        note = f" (wrote {new_files} new datasets-cache files)" if new_files else ""
        print(f"  {name} {who}: {wall:.1f} s{note}", flush=True)
        if new_files:
            row[f"{who}_datasets_cache_files"] = new_files
    for who in JAXEVAL_RUNS:
        if who in results:
            row[f"{who}_timing"] = timing_block(results[who])
    for num, den in (("dummy", "warm"), ("hf", "warm"), ("dummy", "cold")):
        if num in row and den in row:
            row[f"{num}/{den}"] = row[num] / row[den]
    if "hf" in results and "warm" in results:
        row["vs_hf"] = metric_diff(results["warm"], results["hf"])
    if "cold" in results and "warm" in results:
        row["cold_vs_warm"] = metric_diff(results["cold"], results["warm"])
    if "warm" in row:
        row["host_s_per_mtok"] = host_s_per_mtok(row["warm"], row.get("warm_timing", {}))
    if "one_core" in row:
        timing = row.get("one_core_timing", {})
        row["host_s_per_mtok_one_core"] = host_s_per_mtok(row["one_core"], timing)
    return row


def fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def metrics_cell(diff: dict | None) -> str:
    if not diff:
        return "-"
    if diff["equal"]:
        return f"equal ({diff['compared']} values)"
    extra = f", {len(diff['only_one_side'])} one side only" if diff["only_one_side"] else ""
    return (
        f"max abs diff {diff['max_abs_diff']:.3g} at {diff['worst']}, "
        f"max rel diff {diff['max_rel_diff']:.2g}{extra}"
    )


def print_report(rows: list[dict], tpu: float, tpu_source: str) -> None:
    print("\n| workload | dummy s | hf s | jaxeval cold s | jaxeval warm s | jaxeval warm, one core s "
          "| dummy/warm | hf/warm | dummy/cold | metrics: jaxeval warm vs lm-eval hf |")  # fmt: skip
    print("|" + "---|" * 10)
    for r in rows:
        cells = [fmt(r.get(k)) for k in RUNS]
        cells += [fmt(r.get(k), ".2f", "x") for k in ("dummy/warm", "hf/warm", "dummy/cold")]
        print(f"| {r['workload']} | " + " | ".join(cells) + f" | {metrics_cell(r.get('vs_hf'))} |")
    for r in rows:
        if r.get("cold_vs_warm") and not r["cold_vs_warm"]["equal"]:
            print(f"  {r['workload']}: cold and warm metrics differ: {r['cold_vs_warm']}")
        if r.get("vs_hf", {}).get("only_one_side"):
            print(f"  {r['workload']}: only one side has {r['vs_hf']['only_one_side'][:8]}")
    timed = [r for r in rows if r.get("warm_timing")]
    if not timed:
        print("\njaxeval's results have no top-level `timing` block: no phase table.")
        return
    phases = list(dict.fromkeys(p for r in timed for p in r["warm_timing"]["phases_s"]))
    print("\njaxeval warm, phases (s) from its results' `timing` block:\n")
    print("| workload | wall s (own) | " + " | ".join(phases) + " | unaccounted | compiles | "
          "scored tokens | generated tokens | host s | dummy / host s | host s / M scored tokens "
          "| the same, one core | TPU device s / M |")  # fmt: skip
    print("|" + "---|" * (len(phases) + 11))
    for r in timed:
        t = r["warm_timing"]
        cells = [fmt(t.get("wall_s"), ".2f")]
        cells += [fmt(t["phases_s"].get(p), ".2f") for p in phases]
        cells += [fmt(t.get("unaccounted_s"), ".2f"), str(t.get("compiles", "-"))]
        cells += [f"{t.get('scored_tokens', 0):,}", f"{t.get('generated_tokens', 0):,}"]
        host = host_seconds(r.get("warm"), t)
        ratio = r["dummy"] / host if host and r.get("dummy") else None
        cells += [fmt(host, ".2f"), fmt(ratio, ".2f", "x")]
        cells += [
            fmt(r.get("host_s_per_mtok"), ".1f"),
            fmt(r.get("host_s_per_mtok_one_core"), ".1f"),
        ]
        cells += [f"{tpu:.2f}"]
        print(f"| {r['workload']} | " + " | ".join(cells) + " |")
    print(f"\nTPU device s / M scored tokens: {tpu:.2f} ({tpu_source}).")
    print(
        "Host s = process wall - device - compile (the model's own time taken out: what the "
        "bare harness does); host s / M = host s / scored tokens x 1e6, warm run "
        "('-': no scored tokens, e.g. generation only)."
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="arc_lambada,mmlu,gsm8k,hellaswag")
    p.add_argument("--skip-hf", action="store_true", help="leave out lm-eval's HF backend")
    p.add_argument("--limit", type=int, default=None, help="documents per task (quick checks)")
    p.add_argument("--json", default=None, help="write every figure here")
    p.add_argument("--tokenizer", choices=("smollm2", "tiny"), default="smollm2")
    p.add_argument("--tpu-device-s-per-mtok", type=float, default=None)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, results)")
    args = p.parse_args(argv)
    names = parse_workloads(args.workloads)
    if args.tpu_device_s_per_mtok is not None:
        tpu, tpu_source = args.tpu_device_s_per_mtok, "--tpu-device-s-per-mtok"
    else:
        tpu, tpu_source = tpu_device_s_per_mtok()

    root = pathlib.Path(tempfile.mkdtemp(prefix="jaxeval-bench-host-"))
    print(f"nproc {os.cpu_count()}, CPU {cpu_model()}, load {os.getloadavg()}")
    print(f"{versions()}; python {platform.python_version()}; temp dir {root}")
    model, what = build_model(root, args.tokenizer, names)
    print(f"model: {what}", flush=True)
    base_env = {k: v for k, v in os.environ.items() if k not in CACHE_OVERRIDES}
    base_env.update(OFFLINE, HF_DATASETS_CACHE=str(root / "hf_datasets"))
    rows = []
    for name in names:
        rows.append(run_workload(name, args, root, model, base_env))
        if args.json:  # after every workload, so a long run keeps what it measured
            write_json(args.json, args, what, tpu, tpu_source, rows)
    print_report(rows, tpu, tpu_source)
    if args.json:
        write_json(args.json, args, what, tpu, tpu_source, rows)
    if args.keep:
        print(f"logs and results kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if any("error" in r or any(k.endswith("_error") for k in r) for r in rows) else 0


def write_json(path: str, args, what: str, tpu: float, tpu_source: str, rows: list[dict]) -> None:
    report = {
        "machine": {"nproc": os.cpu_count(), "cpu": cpu_model(), "versions": versions()},
        "model": what,
        "limit": args.limit,
        "tpu_device_s_per_mtok": tpu,
        "tpu_source": tpu_source,
        "rows": rows,
    }
    pathlib.Path(path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
