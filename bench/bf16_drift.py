"""bfloat16 on a real model: jaxeval's drift from float32, beside lm-eval HF's own bf16 drift.

Runs the real-model cases (SmolLM2-135M-Instruct Q4_1 GGUF on the demo's bundled rows, see
tests/e2e/real_model.py) through jaxeval with `dtype=float32` and `dtype=bfloat16` (bf16 weights and
activations; log-softmax and sums in float32), and reads lm-eval 0.4.13 HF's answers for the same
rows in float32 and bfloat16 (written by `python -m tests.e2e.make_real_model_golden --dtype ...`).

    PYTHONPATH=. python bench/bf16_drift.py

Prints one markdown table: per task, each metric four ways, and the largest per-request change
of a log-likelihood (or the share of changed generations) from float32 to bfloat16, on each side.
"""

from __future__ import annotations

import json
import time

from tests.e2e.real_model import CASES, golden_path, run_jaxeval


def _run(dtype: str) -> dict:
    out = {}
    for task in CASES:
        metrics, samples = run_jaxeval(task, dtype)
        out[task] = {"results": metrics, "samples": [{"resps": s["resps"]} for s in samples]}
    return out


def _values(samples: list[dict]) -> list:
    vals = []
    for s in samples:
        for resp in s["resps"]:
            for v in resp:
                vals.append(v[0] if isinstance(v, (list, tuple)) else v)
    return vals


def _drift(a: list[dict], b: list[dict]) -> str:
    va, vb = _values(a), _values(b)
    if va and isinstance(va[0], str):
        changed = sum(x != y for x, y in zip(va, vb))
        return f"{changed}/{len(va)} generations differ"
    return f"{max(abs(x - y) for x, y in zip(va, vb)):.3g}"


def main() -> None:
    start = time.time()
    ours = {"float32": _run("float32"), "bfloat16": _run("bfloat16")}
    theirs = {d: json.loads(golden_path(d).read_text()) for d in ("float32", "bfloat16")}
    print(f"(jaxeval runs: {time.time() - start:.0f}s)\n")
    print(
        "| task | metric | jaxeval f32 | jaxeval bf16 | lm-eval f32 | lm-eval bf16 "
        "| jaxeval max abs(bf16 - f32) | lm-eval max abs(bf16 - f32) | jaxeval bf16 vs lm-eval bf16 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for task in CASES:
        drift_ours = _drift(ours["float32"][task]["samples"], ours["bfloat16"][task]["samples"])
        drift_theirs = _drift(
            theirs["float32"][task]["samples"], theirs["bfloat16"][task]["samples"]
        )
        cross = _drift(ours["bfloat16"][task]["samples"], theirs["bfloat16"][task]["samples"])
        for key in sorted(theirs["float32"][task]["results"]):
            cells = [
                ours["float32"][task]["results"].get(key),
                ours["bfloat16"][task]["results"].get(key),
                theirs["float32"][task]["results"].get(key),
                theirs["bfloat16"][task]["results"].get(key),
            ]
            text = " | ".join(f"{c:.4f}" if isinstance(c, (int, float)) else "-" for c in cells)
            print(f"| {task} | {key} | {text} | {drift_ours} | {drift_theirs} | {cross} |")
            drift_ours = drift_theirs = cross = ""


if __name__ == "__main__":
    main()
