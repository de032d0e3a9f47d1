"""One decode step at real shapes: SmolLM2-135M-Instruct (the demo's GGUF), in process.

    python bench/bench_decode_step.py [--rows 8] [--slots 256,1280] [--steps 20]

Times the model's public `forward_cached` + head for one token per row (`decode_step`), jitted with
the cache donated, in a `fori_loop` of `--steps` steps (as `decode_chunk` runs them), for a shared
slot index (static batches) and a per-row index (continuous batching), at each cache length C with
the cache half written. Beside it: the same step with no cache at all (`hidden` over one token),
which is the floor of the weights' matmuls, and the memory-bandwidth bound (weights once per step +
each row's written KV, over a measured copy bandwidth). A step that grows with C beyond the KV
bytes it reads means the cache is being copied.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval.kernels.decode_step import decode_step
from jaxeval.models import load_model


def bandwidth() -> float:
    """Copy bandwidth in bytes/s (read + write), best of 5 numpy copies of 256 MiB."""
    a = np.ones(1 << 26, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def timed(fn, *args, repeats: int = 3) -> float:
    out = fn(*args)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--slots", default="256,1280")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--written", type=int, default=0, help="slots written (default: C / 2)")
    ap.add_argument(
        "--gguf",
        default=str(pathlib.Path.home() / ".cache/jaxeval/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    )
    args = ap.parse_args(argv)
    loaded = load_model(args.gguf, dtype="float32")
    spec, params = loaded.spec, loaded.params
    b, n = args.rows, args.steps
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    kv_slot = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4  # k + v, float32
    bw = bandwidth()
    print(
        f"model: {spec.model_type}, {spec.num_layers} layers, weights {weight_bytes / 1e6:.0f} MB"
    )
    print(f"copy bandwidth {bw / 1e9:.1f} GB/s; KV {kv_slot / 1e3:.0f} KB per slot per row\n")

    def run_steps(params, cache, index0, per_row):
        def body(i, carry):
            cache, tok = carry
            index = index0 + i
            idx = jnp.full((b,), index, jnp.int32) if per_row else index
            pos = jnp.full((b,), index, jnp.int32)
            logits, cache = decode_step(params, cache, tok, pos, idx, model=spec)
            return cache, jnp.argmax(logits, -1).astype(jnp.int32)

        return jax.lax.fori_loop(0, n, body, (cache, jnp.zeros((b,), jnp.int32)))

    step = jax.jit(run_steps, static_argnames="per_row", donate_argnums=(1,))

    def no_cache(params, tok):
        def body(i, tok):
            z = jnp.zeros((b, 1), jnp.int32)
            h = spec.hidden(params, tok[:, None], z + i, z + 1, z)
            return jnp.argmax(spec.head(params, h[:, 0]), -1).astype(jnp.int32)

        return jax.lax.fori_loop(0, n, body, tok)

    floor = timed(jax.jit(no_cache), params, jnp.zeros((b,), jnp.int32)) / n
    print(f"{'path':<28}{'C':>6}{'ms/step':>10}{'bound ms':>10}{'tok/s':>9}")
    print(f"{'no cache (matmul floor)':<28}{'-':>6}{floor * 1e3:>10.1f}{'':>10}{b / floor:>9.0f}")
    for c in [int(s) for s in args.slots.split(",")]:
        written = args.written or c // 2
        bound = (weight_bytes + b * written * kv_slot) / bw
        for per_row in (False, True):
            cache = spec.init_cache(b, c, jnp.float32)
            valid = cache.valid.at[:, :written].set(True)
            cache = cache._replace(valid=valid)
            index0 = jnp.int32(written - n)
            t = float("inf")
            for _ in range(3):
                jax.block_until_ready(cache)
                start = time.perf_counter()
                cache, _tok = jax.block_until_ready(step(params, cache, index0, per_row=per_row))
                t = min(t, time.perf_counter() - start)
            name = "per-row index" if per_row else "shared index"
            ms = t / n * 1e3
            print(f"{name:<28}{c:>6}{ms:>10.1f}{bound * 1e3:>10.1f}{b / (t / n):>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
