"""Does a long rolling row stay near the MLP's cost? The model body per token at T = 512 .. 16384.

    python bench/bench_long_rows.py [--model smollm2-135m] [--tokens 16384] [--reps 3]

Runs `ModelSpec.hidden` (the layer stack, blocked attention from T = 512) on one batch of
`--tokens` tokens cut into rows of T, every row one causal segment (a rolling window), and prints
milliseconds per 1,000 tokens with the rate in GFLOP/s counting the projections and MLP only and
counting causal attention too (4 H E T/2 per token and layer). At T = 512 attention is a few
percent of the body at these widths, so the growth of ms / 1k tokens from T = 512 to 8192 is what
long windows cost beyond the projections and the MLP.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from real_shapes import SHAPES, build  # noqa: E402


def flops_per_token(shape: dict, context: float) -> tuple[float, float]:
    d, f = shape["hidden_size"], shape["intermediate_size"]
    h, g = shape["num_attention_heads"], shape["num_key_value_heads"]
    e = shape.get("head_dim", d // h)
    proj = 2 * d * (h * e + 2 * g * e) + 2 * h * e * d + 2 * 3 * d * f
    return shape["num_hidden_layers"] * proj, shape["num_hidden_layers"] * 4 * h * e * context


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m", choices=sorted(SHAPES))
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--lengths", default="512,2048,8192,16384")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    from jaxeval.models import load_model
    from jaxeval.platform.mesh import make_mesh

    loaded = load_model(build(args.model), mesh=make_mesh("single"), dtype="float32")
    spec, params, shape = loaded.spec, loaded.params, SHAPES[args.model]
    print(f"{args.model}: {args.tokens} tokens per call, best of {args.reps}")
    print("| T | rows | ms / 1k tokens | projections+MLP GFLOP/s | with attention GFLOP/s |")
    print("|---|---|---|---|---|")
    for t in [int(x) for x in args.lengths.split(",")]:
        b = max(1, args.tokens // t)
        tokens = jnp.asarray(np.random.default_rng(0).integers(1, 1000, (b, t)), jnp.int32)
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        segment = jnp.ones((b, t), jnp.int32)
        parent = jnp.zeros((b, t), jnp.int32)
        fn = jax.jit(lambda p, *a: spec.hidden(p, *a).sum())
        fn(params, tokens, positions, segment, parent).block_until_ready()
        best = 1e9
        for _ in range(args.reps):
            s = time.perf_counter()
            fn(params, tokens, positions, segment, parent).block_until_ready()
            best = min(best, time.perf_counter() - s)
        n = b * t
        proj, attn = flops_per_token(shape, t / 2)
        print(
            f"| {t} | {b} | {1000 * best / n * 1000:.1f} | {n * proj / best / 1e9:.0f} | "
            f"{n * (proj + attn) / best / 1e9:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
