"""Does one long row's memory grow linearly with its length on the CPU? SmolLM2-135M, 2k to 8k.

    python bench/long_context_memory.py [--model smollm2-135m] [--lengths 2048,4096,8192]

Each length runs in a fresh process (peak resident memory is per process): one row of T tokens
scored as a run scores it (`ModelSpec.hidden` through the model's CPU attention backend, the LM
head at 64 score points) and prefilled as generation prefills it (`forward_new`: the hidden
states and every layer's keys and values, nothing else). Printed per T: the process's peak
resident memory, the compiled programs' temporaries (XLA's `memory_analysis`), their growth
against T = the first length, and the largest relative difference between the first 2,048
positions' logits of the long row and of a 2,048-token row holding the same tokens (causal
attention: the same numbers, up to float32 summation order).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

SHORT = 2048
POINTS = 64


def one_length(model: str, t: int) -> dict:
    import jax
    import numpy as np
    from real_shapes import build

    from jaxeval.models import decoder, load_model
    from jaxeval.models.runtime import make_runtime
    from jaxeval.platform.mesh import make_mesh

    mesh = make_mesh("single")
    loaded = load_model(build(model), mesh=mesh, dtype="float32")
    spec, params = loaded.spec, loaded.params
    runtime = make_runtime(mesh)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, spec.vocab_size, (1, t)).astype(np.int32)

    def row(n):
        return (
            tokens[:, :n],
            np.arange(n, dtype=np.int32)[None],
            np.ones((1, n), np.int32),
            np.zeros((1, n), np.int32),
        )

    def scored(p, toks, pos, seg, par):
        h = spec.hidden(p, toks, pos, seg, par, runtime=runtime)
        return spec.head(p, h[:, :SHORT][:, -POINTS:])  # [1, 64, V]: the last points of 2,048

    def prefill(p, toks, pos):
        prefix = spec.init_cache(1, 0, "float32")
        valid = np.ones(toks.shape, bool)
        return decoder.forward_new(spec, p, prefix, toks, pos, valid, 0, runtime=runtime)

    out = {"length": t}
    temps = 0
    score = jax.jit(scored).lower(params, *row(t)).compile()
    temps += score.memory_analysis().temp_size_in_bytes
    logits = np.asarray(score(params, *row(t)))
    fill = jax.jit(prefill).lower(params, *row(t)[:2]).compile()
    temps += fill.memory_analysis().temp_size_in_bytes
    jax.block_until_ready(fill(params, *row(t)[:2]))
    out["temp_bytes"] = int(temps)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if t > SHORT:  # the long row's first 2,048 positions against a row of 2,048
        short = np.asarray(jax.jit(scored)(params, *row(SHORT)))
        out["max_rel_diff_vs_short"] = float(np.abs(logits - short).max() / np.abs(short).max())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--lengths", default="2048,4096,8192")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one_length(args.model, args.one)))
        return 0
    rows = []
    for t in [int(x) for x in args.lengths.split(",")]:
        cmd = [sys.executable, __file__, "--model", args.model, "--one", str(t)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = rows[0]
    print(f"{args.model}, one row scored (64 points) and prefilled, float32, CPU, one process each")
    print(
        "| T | peak RSS MiB | growth | temporaries MiB | growth | T / first T | logits vs 2,048 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rss = r["peak_rss_bytes"] / 2**20
        tmp = r["temp_bytes"] / 2**20
        diff = r.get("max_rel_diff_vs_short")
        print(
            f"| {r['length']:,} | {rss:,.0f} | {r['peak_rss_bytes'] / base['peak_rss_bytes']:.2f}x "
            f"| {tmp:,.1f} | {r['temp_bytes'] / base['temp_bytes']:.2f}x "
            f"| {r['length'] / base['length']:.0f}x | {'-' if diff is None else f'{diff:.1e}'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
