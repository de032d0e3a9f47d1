"""Whole-process speed: `lm_eval --model hf` against `jaxeval --model hf`, one task per process.

Each run is one subprocess (`phase_timer.py`: the tool's own CLI, its request methods timed) with
the same arguments for both tools:

    --model hf --model_args pretrained=DIR,dtype=D --device DEV --batch_size N --tasks T
    --include_path TASKS --limit L --log_samples --output_path OUT

Tasks are local YAMLs over the bundled rows (`dataset_path: json`): ARC-Easy and LAMBADA as
bench/bench_real.py writes them, GSM8K 5-shot from tasks/gsm8k/gsm8k.yaml with `max_gen_toks`
capped. jaxeval starts with a cold XLA compilation cache in every run (compiles are counted) and a
warm task index (`jaxeval ls tasks` once before: a one-time cost per installation).

Per run: wall seconds (start-up, model load, compiles, requests), the request phase's seconds, and
from the samples files: model FLOPs = 2 x (layer + head parameters) x tokens (every request's
context + continuation, or prompt + generated tokens, as the tokenizer counts them; the same
numerator for both tools), MFU = FLOPs / seconds / the measured matmul peak, and for generation the
decode bandwidth = (weight bytes + each row's KV bytes) per step / step time, over the measured
copy bandwidth (the step time is the generation phase over its steps, prefill and jaxeval's
compiles included: a lower bound). Both tools' answers are compared request by request.
"""

from __future__ import annotations

import glob
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from bench_real import ARC, ENV, LAMBADA, results_of  # noqa: E402
from checkpoints import flop_params, kv_bytes_per_token, shape  # noqa: E402

TASKS = {"arc_easy": "arc_easy_bench", "lambada": "lambada_bench", "gsm8k": "gsm8k_bench"}
TOOLS = ("lm_eval", "jaxeval")


def gsm8k_yaml(data: pathlib.Path, max_gen_toks: int) -> str:
    """tasks/gsm8k/gsm8k.yaml over local rows, `max_gen_toks` added to its generation_kwargs."""
    keep, in_tag = [], False
    for line in (REPO / "tasks" / "gsm8k" / "gsm8k.yaml").read_text().splitlines():
        if in_tag and line.lstrip().startswith("- "):
            continue
        in_tag = line.startswith("tag:")
        if line.startswith(("tag:", "task:", "dataset_path", "dataset_name")):
            continue
        keep.append(line)
        if line.strip().startswith("temperature:"):
            keep.append(f"  max_gen_toks: {max_gen_toks}")
    head = (
        "task: gsm8k_bench\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    train: {data}/gsm8k/train.jsonl\n    test: {data}/gsm8k/test.jsonl\n"
    )
    return head + "\n".join(keep) + "\n"


def write_tasks(root: pathlib.Path, data: pathlib.Path, max_gen_toks: int) -> pathlib.Path:
    tasks = root / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "arc_easy_bench.yaml").write_text(ARC.format(name="arc_easy_bench", data=data))
    (tasks / "lambada_bench.yaml").write_text(LAMBADA.format(data=data))
    (tasks / "gsm8k_bench.yaml").write_text(gsm8k_yaml(data, max_gen_toks))
    return tasks


def tool_env(work: pathlib.Path) -> dict:
    """The tools' environment: offline, one shared jaxeval cache (task index), quiet tokenizers."""
    return {**os.environ, **ENV, "JAXEVAL_CACHE": str(work / "jaxeval-cache")}


def warm_task_index(work: pathlib.Path, tasks: pathlib.Path, timeout: float) -> float:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "jaxeval", "ls", "tasks", "--include_path", str(tasks)]
    subprocess.run(cmd, env=tool_env(work), capture_output=True, timeout=timeout, check=True)
    return time.perf_counter() - start


def _tail(path: pathlib.Path, lines: int = 15) -> str:
    """The last non-blank lines of a log (progress bars' carriage returns as line breaks)."""
    text = path.read_text(errors="replace").replace("\r", "\n") if path.exists() else ""
    return "\n".join([x[:300] for x in text.splitlines() if x.strip()][-lines:])


def run_tool(tool: str, cmd_args: list[str], out: pathlib.Path, work: pathlib.Path,
             timeout: float) -> dict:  # fmt: skip
    """One tool, one task, one process; raises with the log's last lines when it fails."""
    out.mkdir(parents=True, exist_ok=True)
    phases, log = out / "phases.jsonl", out / "log.txt"
    env = {**tool_env(work), "PHASE_TIMES": str(phases)}
    env["JAXEVAL_COMPILATION_CACHE"] = str(out / "xla")  # cold: this run's compiles count
    cmd = [sys.executable, str(HERE / "phase_timer.py"), tool, *cmd_args, "--output_path", str(out)]
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"timed out after {timeout:.0f} s:\n{_tail(log)}") from None
    wall = time.perf_counter() - start
    if rc:
        raise RuntimeError(f"exit {rc}:\n{_tail(log)}")
    rows = [json.loads(x) for x in phases.read_text().splitlines()] if phases.exists() else []
    config = results_of(out).get("config", {})
    return {
        "wall_s": wall,
        "phase_s": sum(r["seconds"] for r in rows),
        "phases": rows,
        "jaxeval_stats": {k: config[k] for k in ("scoring_stats", "timing") if k in config},
        "samples": read_samples(out),
    }


def read_samples(out: pathlib.Path) -> dict[int, dict]:
    """doc id -> {"args": [(context, continuation or gen kwargs)], "resps": [answer]}; one row per
    document (GSM8K logs a row per filter, with the same raw answers)."""
    docs: dict[int, dict] = {}
    for path in sorted(glob.glob(str(out / "**" / "samples_*.jsonl"), recursive=True)):
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            args = [(a.get("arg_0"), a.get("arg_1")) for a in r["arguments"].values()]
            docs.setdefault(r["doc_id"], {"args": args, "resps": [x[0] for x in r["resps"]]})
    return docs


def count_tokens(docs: dict[int, dict], tokenizer, max_gen_toks: int) -> dict:
    """Request tokens: context + continuation (loglikelihood) or prompt + generated (generation)."""
    tokens = prompt = generated = 0
    steps = 0
    for doc in docs.values():
        for (ctx, cont), resp in zip(doc["args"], doc["resps"]):
            if isinstance(resp, str):  # generate_until: cont holds the generation kwargs
                p = len(tokenizer.encode(ctx).ids)
                n = min(max_gen_toks, len(tokenizer.encode(resp, add_special_tokens=False).ids))
                prompt, generated, steps = prompt + p, generated + n, max(steps, n)
                tokens += p + n
            else:
                tokens += len(tokenizer.encode(ctx + cont).ids)
    return {"tokens": tokens, "prompt_tokens": prompt, "generated_tokens": generated,
            "max_generated": steps}  # fmt: skip


def compare(a: dict[int, dict], b: dict[int, dict]) -> dict:
    """Request-by-request: max |loglikelihood difference| and greedy flags that differ, or
    generated strings that differ."""
    worst, flags, same, texts, n = 0.0, 0, 0, 0, 0
    for doc_id in sorted(set(a) & set(b)):
        for x, y in zip(a[doc_id]["resps"], b[doc_id]["resps"]):
            n += 1
            if isinstance(x, str) or isinstance(y, str):
                texts += 1
                same += x == y
            else:
                worst = max(worst, abs(float(x[0]) - float(y[0])))
                flags += bool(x[1]) != bool(y[1])
    out = {"requests": n, "max_abs_diff": worst if n > texts else None, "greedy_differ": flags}
    if texts:
        out["generations_identical"] = f"{same}/{texts}"
    return out


def measures(run: dict, count: dict, model: str, dtype_bytes: int, rows_per_batch: int,
             peak_flops: float | None, copy_bw: float | None) -> dict:  # fmt: skip
    """MFU over the whole process and over the request phase; for generation the decode bandwidth."""
    s = shape(model)
    flops = 2.0 * flop_params(s) * count["tokens"]
    out = {"model_flops": flops}
    for key, seconds in (("mfu_process", run["wall_s"]), ("mfu_phase", run["phase_s"])):
        out[key] = flops / seconds / peak_flops if peak_flops and seconds > 0 else None
    if count["generated_tokens"]:
        docs = len(run["samples"])
        batches = math.ceil(docs / rows_per_batch)
        steps = count["max_generated"] * batches
        rows = min(docs, rows_per_batch)
        context = count["prompt_tokens"] / docs + count["max_generated"] / 2
        step_bytes = flop_params(s) * dtype_bytes + rows * context * kv_bytes_per_token(
            s, dtype_bytes
        )
        step_s = run["phase_s"] / steps if steps else None
        out["decode_step_ms"] = 1e3 * step_s if step_s else None
        bw = step_bytes / step_s if step_s else None
        out["decode_bytes_per_s"] = bw
        out["decode_bw_fraction"] = bw / copy_bw if bw and copy_bw else None
    return out


def run_model(model: str, model_dir: str, *, work: pathlib.Path, tasks: pathlib.Path, plan: dict,
              deadline: float, peak_flops: float | None, copy_bw: float | None,
              log=print) -> dict:  # fmt: skip
    """Every task of `plan` with both tools on one checkpoint; each run fails (or is skipped when
    `deadline`, a perf_counter time, is near) on its own. `plan`: dtype, device, batch_size,
    limits {task: docs}, max_gen_toks, jaxeval_args (extra model_args)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(pathlib.Path(model_dir) / "tokenizer.json"))
    dtype_bytes = 2 if plan["dtype"] in ("bfloat16", "float16") else 4
    report = {}
    for task, limit in plan["limits"].items():
        row: dict = {"docs": limit}
        runs = {}
        for tool in TOOLS:
            left = deadline - time.perf_counter()
            if left < plan.get("min_run_s", 20):
                row[tool] = {"status": "skipped: time budget"}
                continue
            extra = plan.get("jaxeval_args", "") if tool == "jaxeval" else ""
            args = [
                "--model", "hf",
                "--model_args", f"pretrained={model_dir},dtype={plan['dtype']}{extra}",
                "--device", plan["device"], "--batch_size", str(plan["batch_size"]),
                "--tasks", TASKS[task], "--include_path", str(tasks),
                "--limit", str(limit), "--log_samples",
            ]  # fmt: skip
            try:
                run = run_tool(tool, args, work / "runs" / model / task / tool, work, left)
            except Exception as e:  # noqa: BLE001 - each run fails on its own, with its error
                row[tool] = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
                log(f"  {model} {task} {tool}: FAILED {row[tool]['error'][-600:]}")
                continue
            runs[tool] = run
            row[tool] = {k: v for k, v in run.items() if k != "samples"}
            row[tool]["status"] = "ok"
            log(f"  {model} {task} {tool}: {run['wall_s']:.1f} s (requests {run['phase_s']:.1f} s)")
        if runs:
            docs = runs.get("lm_eval", runs.get("jaxeval"))["samples"]
            count = count_tokens(docs, tokenizer, plan["max_gen_toks"])
            row["count"] = count
            for tool, run in runs.items():
                row[tool].update(measures(run, count, model, dtype_bytes, plan["batch_size"],
                                          peak_flops, copy_bw))  # fmt: skip
        if len(runs) == 2:
            lm, jx = runs["lm_eval"], runs["jaxeval"]
            row["ratio_process"] = lm["wall_s"] / jx["wall_s"]
            row["ratio_phase"] = lm["phase_s"] / jx["phase_s"] if jx["phase_s"] else None
            row["parity"] = compare(lm["samples"], jx["samples"])
        report[task] = row
    return report
