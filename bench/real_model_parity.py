"""The real-model parity table: jaxeval vs lm-eval HF on SmolLM2-135M-Instruct (Q4_1 GGUF).

Runs the demo tasks and GSM8K 5-shot with the chat template (tests/e2e/real_model.py) through
jaxeval in float32, and compares with lm-eval 0.4.13 HF's recorded answers and the float64
reference values (tests/data/real_model/lm_eval_hf_float32.json):

    PYTHONPATH=. python bench/real_model_parity.py

Per task: requests, max abs difference from lm-eval, how many exceed 1e-4 (+1e-6 relative), and
for those the largest distance from the float64 value on each side; greedy flags and generated
strings compared exactly; metrics side by side.
"""

from __future__ import annotations

import json
import time

from tests.e2e.real_model import CASES, DEMO_TASK, VARIANTS, golden_path, run_jaxeval


def main() -> None:
    from jaxeval.demo.run import run_demo

    start = time.time()
    demo, _, _ = run_demo(log_samples=True)
    runs = {
        key: (demo["results"][DEMO_TASK[key]], demo["samples"][DEMO_TASK[key]]) for key in CASES
    }
    for key in VARIANTS:
        runs[key] = run_jaxeval(key)
    print(f"(jaxeval: {time.time() - start:.0f}s)\n")
    golden = json.loads(golden_path("float32").read_text())
    print(
        "| task | requests | max abs(jaxeval - lm-eval) | beyond 1e-4 + 1e-6 rel | of those: max "
        "abs(jaxeval - f64) / abs(lm-eval - f64) | greedy flags / strings | metrics (jaxeval = lm-eval) |"
    )
    print("|---|---:|---:|---:|---|---|---|")
    for key, (metrics, samples) in runs.items():
        n = beyond = mismatched = 0
        worst = 0.0
        ours_far = theirs_far = 0.0
        for x, y in zip(samples, golden[key]["samples"]):
            refs = y.get("ref64") or [None] * len(y["resps"])
            for rx, ry, ref in zip(x["resps"], y["resps"], refs):
                vx, vy = rx[0], ry[0]
                n += 1
                if isinstance(vy, str):
                    mismatched += vx != vy
                    continue
                a, b = (vx[0], vy[0]) if isinstance(vy, list) else (vx, vy)
                if isinstance(vy, list):
                    mismatched += bool(vx[1]) != bool(vy[1])
                worst = max(worst, abs(a - b))
                if abs(a - b) > 1e-4 + 1e-6 * abs(b):
                    beyond += 1
                    ours_far = max(ours_far, abs(a - ref))
                    theirs_far = max(theirs_far, abs(b - ref))
        far = f"{ours_far:.2e} / {theirs_far:.2e}" if beyond else "-"
        same = all(
            metrics[k] == v or abs(metrics[k] - v) <= 1e-5 * abs(v)
            for k, v in golden[key]["results"].items()
        )
        shown = ", ".join(
            f"{k.split(',')[0]} {v:.4g}" for k, v in sorted(golden[key]["results"].items())
        )
        print(
            f"| {key} | {n} | {worst:.2e} | {beyond} | {far} | {mismatched} differ | "
            f"{'yes' if same else 'NO'}: {shown} |"
        )


if __name__ == "__main__":
    main()
