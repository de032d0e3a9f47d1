"""Short-row speed of two checkouts side by side: scoring and generation on the CPU, warm.

    git worktree add /tmp/base <commit>
    python bench/short_rows_ab.py /tmp/base .          # base first, then this checkout, twice

For each checkout (its own process, its own compile cache under a temporary directory), a
4-layer 256-wide Llama built by the tests' helper scores 600 LAMBADA requests (loglikelihood)
and generates for 128 GSM8K questions (32 new tokens, greedy), each three times after a warm-up
call; prints the best of three, the ratio to the first checkout, and whether the scores and
generations are identical. Default flags, one CPU device: what a change to the long-context
paths must leave alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from tests.helpers.tiny_models import tiny_checkpoint
from jaxeval.api.instance import Instance
from jaxeval.lm.jax_lm import JaxLM

data, models = sys.argv[2], sys.argv[3]
path = tiny_checkpoint(
    "llama", root=models, hidden_size=256, num_hidden_layers=4, intermediate_size=768,
    num_attention_heads=4, num_key_value_heads=4,
)
lambada = [json.loads(x) for x in open(os.path.join(data, "lambada_openai", "test.jsonl"))][:600]
gsm8k = [json.loads(x) for x in open(os.path.join(data, "gsm8k", "test.jsonl"))][:128]
lm = JaxLM(pretrained=path, dtype="float32", max_length=2048)
score = [
    Instance("loglikelihood", {}, (r["text"][: r["text"].rfind(" ")], r["text"][r["text"].rfind(" "):]), i)
    for i, r in enumerate(lambada)
]
until = {"until": ["\n\n"], "max_gen_toks": 32, "do_sample": False}
gen = [Instance("generate_until", {}, (r["question"], until), i) for i, r in enumerate(gsm8k)]
out = {}
for name, call, reqs in (("score", lm.loglikelihood, score), ("generate", lm.generate_until, gen)):
    call(reqs, disable_tqdm=True)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        res = call(reqs, disable_tqdm=True)
        times.append(time.perf_counter() - t)
    out[name] = {"best": min(times), "result": [list(r) if isinstance(r, tuple) else r for r in res]}
print("RESULT " + json.dumps(out))
"""


def run(root: str, models: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAXEVAL_CACHE": cache, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, os.path.abspath(root), str(DATA), models],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"{root}: no result\n{proc.stderr[-3000:]}")


def main() -> None:
    roots = sys.argv[1:] or ["."]
    with tempfile.TemporaryDirectory() as models:
        runs = [(root, run(root, models)) for root in [*roots, *roots]]
    base = runs[0][1]
    print(f"{'checkout':40} {'score s':>8} {'ratio':>6} {'generate s':>10} {'ratio':>6} same")
    for root, r in runs:
        same = all(r[k]["result"] == base[k]["result"] for k in ("score", "generate"))
        print(
            f"{root:40} {r['score']['best']:8.3f} {r['score']['best'] / base['score']['best']:6.3f}"
            f" {r['generate']['best']:10.3f}"
            f" {r['generate']['best'] / base['generate']['best']:6.3f} {same}"
        )


if __name__ == "__main__":
    main()
