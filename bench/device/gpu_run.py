"""The prepared GPU run: denominators, cuDNN attention, real-model parity, whole-process speed.

    bash bench/device/run.sh                        # on the GPU machine (README.md): all steps
    python bench/device/gpu_run.py --cpu            # here: the same code path at tiny sizes

Steps, each timed, each in a process of its own (a crash or a timeout ends that step only), each
failing on its own with its exact error, all inside one time budget (`--budget` seconds; a step
that no longer fits is reported as skipped):

    env              devices and versions; the measured matmul peak and copy bandwidth (probes.py)
    attention        GpuAttention.packed (cuDNN) against attention.blocked_attend (probes.py)
    parity           SmolLM2-135M GGUF: lm-eval HF vs jaxeval per request, float32 and bfloat16
                     (skipped where the 98 MB file is absent: --smollm2 PATH or $JAXEVAL_SMOLLM2)
    build:M          a random-weight Llama M with its tokenizer, written to --work (checkpoints.py)
    speed:M          lm-eval HF vs jaxeval on ARC-Easy, LAMBADA and GSM8K, one process per tool
                     and task (speed.py)

GPU mode: Llama-3.2-1B and Llama-3-8B shapes in bfloat16 on CUDA. --cpu: a tiny Llama in float32
and a handful of documents. Results: a table on stdout and `gpu_run.json` (+ the step logs in
`logs.tar.gz`) under --out (default $OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

MODES = {
    "gpu": {
        "models": ["llama-1b", "llama-8b"],
        "plan": {
            "dtype": "bfloat16",
            "device": "cuda",
            "batch_size": 32,
            "max_gen_toks": 256,
            "limits": {"arc_easy": 50, "lambada": 50, "gsm8k": 30},
            "min_run_s": 20,
        },
        "budget": 430,
        "parity_docs": 10,
        "caps": {"env": 90, "attention": 150, "parity": 200, "build": 180},
        "build_needs": {"llama-1b": 60, "llama-8b": 150},  # seconds left to be worth building
    },  # fmt: skip
    "cpu": {
        "models": ["tiny"],
        "plan": {
            "dtype": "float32",
            "device": "cpu",
            "batch_size": 8,
            "max_gen_toks": 16,
            "limits": {"arc_easy": 5, "lambada": 5, "gsm8k": 3},
            "min_run_s": 20,
        },
        "budget": 1500,
        "parity_docs": 3,
        "caps": {"env": 120, "attention": 300, "parity": 600, "build": 300},
        "build_needs": {"tiny": 60},
    },  # fmt: skip
}


def _smollm2(given: str | None) -> str | None:
    """--smollm2, else $JAXEVAL_SMOLLM2, else jaxeval's model cache, else .test-models."""
    if given:
        return given
    if os.environ.get("JAXEVAL_SMOLLM2"):
        return os.environ["JAXEVAL_SMOLLM2"]
    from jaxeval.demo.fetch import FILE_NAME, smollm2_path

    found = smollm2_path()
    local = REPO / ".test-models" / "models" / FILE_NAME
    return found or (str(local) if local.is_file() else None)


# ---- one step, in its own process ------------------------------------------------------------
def run_step(name: str, args: argparse.Namespace) -> dict:
    import probes

    cpu = args.cpu
    if name == "env":
        return probes.env(cpu)
    if name == "attention":
        return probes.attention(cpu)
    if name == "parity":
        return probes.parity(cpu, _smollm2(args.smollm2), pathlib.Path(args.data), args.parity_docs)
    if name.startswith("build:"):
        from checkpoints import build_model

        model = name.split(":", 1)[1]
        plan = MODES["cpu" if cpu else "gpu"]["plan"]
        out = pathlib.Path(args.work) / model
        return build_model(model, out, pathlib.Path(args.data), dtype=plan["dtype"],
                           device=plan["device"])  # fmt: skip
    raise ValueError(f"unknown step {name!r}")


def step_main(args: argparse.Namespace) -> int:
    try:
        result, rc = {"status": "ok", "result": run_step(args.step, args)}, 0
    except Exception as e:  # noqa: BLE001 - the parent reports it and goes on
        traceback.print_exc()
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
        rc = 1
    pathlib.Path(args.step_out).write_text(json.dumps(result, indent=1, default=str))
    return rc


# ---- the orchestrating process (touches no device) -------------------------------------------
class Runner:
    def __init__(self, args: argparse.Namespace, mode: dict):
        self.args, self.mode = args, mode
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget
        self.work = pathlib.Path(args.work)
        self.out = pathlib.Path(args.out)
        self.report: dict = {"mode": "cpu" if args.cpu else "gpu", "budget_s": args.budget,
                             "plan": mode["plan"], "steps": {}}  # fmt: skip

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def save(self) -> None:
        self.report["elapsed_s"] = time.perf_counter() - self.start
        (self.out / "gpu_run.json").write_text(json.dumps(self.report, indent=1, default=str))

    def record(self, name: str, entry: dict, seconds: float) -> dict:
        entry["seconds"] = seconds
        if entry["status"] == "ok" and "skipped" in (entry.get("result") or {}):
            entry["status"] = f"skipped: {entry['result']['skipped']}"  # e.g. parity, no GGUF
        self.report["steps"][name] = entry
        self.save()
        status = entry["status"]
        line = f"[{time.perf_counter() - self.start:6.1f} s] {name}: {status} ({seconds:.1f} s)"
        print(line + (f"\n    {entry.get('error', '')[-1500:]}" if status == "failed" else ""),
              flush=True)  # fmt: skip
        return entry

    def subprocess_step(self, name: str, cap: float, needs: float = 15) -> dict:
        if self.left() < needs:
            return self.record(name, {"status": "skipped: time budget"}, 0.0)
        timeout = max(5.0, min(cap, self.left() - 5))
        step_out = self.work / "steps" / f"{name.replace(':', '_')}.json"
        log = self.work / "logs" / f"{name.replace(':', '_')}.log"
        step_out.parent.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(HERE / "gpu_run.py"), *self.args.argv, "--step", name,
               "--step-out", str(step_out)]  # fmt: skip
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # torch and JAX share it
        start = time.perf_counter()
        try:
            with open(log, "w") as f:
                subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            entry = json.loads(step_out.read_text()) if step_out.exists() else None
            if entry is None:
                tail = log.read_text(errors="replace").strip().splitlines()[-15:]
                entry = {"status": "failed", "error": "no result; log tail:\n" + "\n".join(tail)}
        except subprocess.TimeoutExpired:
            entry = {"status": "failed", "error": f"timed out after {timeout:.0f} s"}
        return self.record(name, entry, time.perf_counter() - start)

    def speed(self, model: str, model_dir: str) -> None:
        from speed import run_model, warm_task_index, write_tasks

        start = time.perf_counter()
        env = self.report["steps"].get("env", {}).get("result", {})
        try:
            tasks = write_tasks(self.work, pathlib.Path(self.args.data).resolve(),
                                self.mode["plan"]["max_gen_toks"])  # fmt: skip
            if not (self.work / "jaxeval-cache").exists():
                warm_task_index(self.work, tasks, timeout=max(5.0, min(120, self.left())))
            result = run_model(
                model, model_dir, work=self.work, tasks=tasks, plan=self.mode["plan"],
                deadline=self.deadline, peak_flops=env.get("peak_flops"),
                copy_bw=env.get("copy_bytes_per_s"),
            )  # fmt: skip
            entry = {"status": "ok", "result": result}
        except Exception as e:  # noqa: BLE001
            entry = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        self.record(f"speed:{model}", entry, time.perf_counter() - start)

    def run(self) -> None:
        caps = self.mode["caps"]
        for name in ("env", "attention", "parity"):
            if name in self.args.steps:
                self.subprocess_step(name, caps[name])
        for model in self.args.models:
            if "speed" not in self.args.steps:
                break
            built = self.subprocess_step(
                f"build:{model}", caps["build"], needs=self.mode["build_needs"].get(model, 60)
            )
            if built["status"] == "ok":
                self.speed(model, built["result"]["path"])
            else:
                self.record(f"speed:{model}", {"status": "skipped: no checkpoint"}, 0.0)
            shutil.rmtree(self.work / model, ignore_errors=True)  # 16 GB for the 8B
        self.save()

    def bundle_logs(self) -> None:
        with tarfile.open(self.out / "logs.tar.gz", "w:gz") as tar:
            for path in sorted(self.work.rglob("*")):
                if path.is_file() and path.suffix in (".log", ".txt", ".jsonl", ".json"):
                    if path.stat().st_size < 4 << 20 and "jaxeval-cache" not in path.parts:
                        tar.add(path, arcname=str(path.relative_to(self.work)))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (a check here)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "out" / "gpu_run"))
    ap.add_argument("--work", default="/tmp/jaxeval-gpu-run", help="checkpoints, runs, logs")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all steps")
    ap.add_argument("--smollm2", default=None, help="the SmolLM2-135M-Instruct Q4_1 GGUF")
    ap.add_argument("--data", default=str(REPO / "tests" / "data"), help="hub-layout JSONL rows")
    ap.add_argument("--steps", default="env,attention,parity,speed")
    ap.add_argument("--models", default=None, help="comma list (default: the mode's)")
    ap.add_argument("--limits", default=None, help="docs per task, e.g. arc_easy=50,gsm8k=30")
    ap.add_argument(
        "--jaxeval_args", default="", help="extra jaxeval model_args, e.g. ,attention=xla"
    )
    ap.add_argument("--parity_docs", type=int, default=None)
    ap.add_argument("--step", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--step-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    mode = MODES["cpu" if args.cpu else "gpu"]
    args.argv = [a for a in argv if a not in ("--step", "--step-out", args.step, args.step_out)]
    args.parity_docs = args.parity_docs or mode["parity_docs"]
    if args.step:
        return step_main(args)
    args.budget = args.budget or mode["budget"]
    args.steps = set(args.steps.split(","))
    args.models = args.models.split(",") if args.models else mode["models"]
    if args.limits:
        mode["plan"]["limits"] = {
            k: int(v) for k, v in (x.split("=") for x in args.limits.split(","))
        }
    if args.jaxeval_args:
        mode["plan"]["jaxeval_args"] = args.jaxeval_args
    if args.cpu:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    for k, v in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                 "TOKENIZERS_PARALLELISM": "false"}.items():  # fmt: skip
        os.environ.setdefault(k, v)
    shutil.rmtree(args.work, ignore_errors=True)
    pathlib.Path(args.work).mkdir(parents=True)
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    runner = Runner(args, mode)
    print(f"gpu_run: {runner.report['mode']} mode, budget {args.budget:.0f} s, out {args.out}",
          flush=True)  # fmt: skip
    if "parity" in args.steps:
        gguf = _smollm2(args.smollm2)
        if gguf and os.path.isfile(gguf):
            print(f"gpu_run: parity on {gguf}", flush=True)
        else:
            where = f"at {gguf}" if gguf else "here (--smollm2 PATH or $JAXEVAL_SMOLLM2)"
            print(f"gpu_run: no SmolLM2 GGUF {where}: the parity step is skipped", flush=True)
    try:
        runner.run()
    finally:
        runner.save()
        from table import render

        text = render(runner.report)
        print(text, flush=True)
        (pathlib.Path(args.out) / "gpu_run.txt").write_text(text)
        runner.bundle_logs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
