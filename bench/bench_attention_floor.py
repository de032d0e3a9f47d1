"""What one attention block costs on this backend, per score element, piece by piece.

    python bench/bench_attention_floor.py            # SmolLM2-135M shapes: 3 query heads per KV head, E = 64

One (batch row, KV head) step of the blocked attention at T = 8,192 with blocks of 512: X * Q =
3 x 512 query rows against 512 keys. Each piece is jitted alone and timed best of 5 over 16 such
blocks; the sum of the pieces is the floor of the blocked attention's formulation here, next to
the two matmuls' time at the 2048^3 matmul peak measured in the same run. Results go into
docs/performance.md (rolling perplexity at 8,192).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

HIGHEST = jax.lax.Precision.HIGHEST


def best(f, *args, n: int = 5) -> float:
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(n):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group", type=int, default=3, help="query heads per KV head")
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=16)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    m_rows, keys, e, reps = args.group * args.block, args.block, args.head_dim, args.blocks

    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    q, k, v = normal(reps, m_rows, e), normal(reps, keys, e), normal(reps, keys, e)
    s, m0 = normal(reps, m_rows, keys), jnp.zeros((reps, m_rows), jnp.float32)

    def softmax_step(s, m0):
        m = jnp.maximum(m0, s.max(-1))
        return m, jnp.exp(s - m[..., None]).sum(-1)

    def whole(q, k, v, m0):
        s = jnp.einsum("bme,bke->bmk", q, k, precision=HIGHEST)
        m, total = softmax_step(s, m0)
        p = jnp.exp(s - m[..., None])
        return m, total, jnp.einsum("bmk,bke->bme", p, v, precision=HIGHEST)

    a = normal(2048, 2048)
    peak = 2 * 2048**3 / best(jax.jit(lambda a: jnp.dot(a, a, precision=HIGHEST)), a)
    per = s.size
    pieces = {
        "q.k (contract E)": (
            lambda q, k: jnp.einsum("bme,bke->bmk", q, k, precision=HIGHEST),
            (q, k),
        ),
        "max, subtract, exp, sum": (softmax_step, (s, m0)),
        "p.v (contract keys)": (
            lambda p, v: jnp.einsum("bmk,bke->bme", p, v, precision=HIGHEST),
            (s, v),
        ),
        "whole block update": (whole, (q, k, v, m0)),
    }
    print(
        f"{jax.default_backend()}: matmul peak {peak / 1e9:.0f} GFLOP/s; block {m_rows} x {keys}, E = {e}"
    )
    total = 0.0
    for name, (fn, fn_args) in pieces.items():
        ns = best(jax.jit(fn), *fn_args) / per * 1e9
        flops = 2 * e if name.startswith(("q.k", "p.v")) else 0
        rate = f"  {flops / ns:.0f} GFLOP/s" if flops else ""
        print(f"  {name:26s} {ns:.3f} ns per score element{rate}")
        total += ns if name != "whole block update" else 0.0
    print(
        f"  {'sum of the pieces':26s} {total:.3f} ns; both matmuls at peak: {4 * e / peak * 1e9:.3f} ns"
    )


if __name__ == "__main__":
    main()
