"""The fused CPU decode-attention kernel alone, against the machine's read bandwidth.

    python bench/bench_decode_kernel.py [--rows 1,8] [--slots 2048] [--written 1200] [--repeats 7]

One decode step's attention at SmolLM2-135M shapes: 30 layers x B rows x 3 KV heads (3 query heads
each, head dim 64), `written` of `slots` cache slots per row, random float32 K/V. It calls
`cpu_attention.cpu_decode_state` once per layer in a jitted loop (as the decode step's layer scan does)
and prints ms per step and the K/V bytes read per second, next to the read bandwidth of the same
machine (numpy sums over 512 MiB, one thread and one per core), so the kernel's distance from the
memory bound is a ratio measured in one run. The decode step around it: `bench_decode_step.py`.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval.models.contract import KVCache
from jaxeval.ops.attention import cpu as cpu_attention

LAYERS, KV_HEADS, GROUP, HEAD_DIM = 30, 3, 3, 64


def read_bandwidth(threads: int) -> float:
    """Bytes/s that `threads` numpy sums read together from one 512 MiB array (best of 5)."""
    a = np.ones(1 << 27, np.float32)
    parts = np.array_split(a, threads)
    best = float("inf")
    for _ in range(5):
        workers = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return a.nbytes / best


def step_time(rows: int, slots: int, written: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    shape_k = (LAYERS, rows, KV_HEADS, HEAD_DIM, slots)
    shape_v = (LAYERS, rows, KV_HEADS, slots, HEAD_DIM)
    k = jnp.asarray(rng.standard_normal(shape_k, np.float32))
    v = jnp.asarray(rng.standard_normal(shape_v, np.float32))
    q = jnp.asarray(rng.standard_normal((rows, KV_HEADS, GROUP, HEAD_DIM), np.float32))
    valid = jnp.ones((rows, slots), bool)
    slot_pos = jnp.broadcast_to(jnp.arange(slots, dtype=jnp.int32), (rows, slots))
    bound = jnp.full((rows,), written, jnp.int32)
    q_pos = jnp.full((rows,), written, jnp.int32)

    @jax.jit
    def step(q, k, v):
        def layer(i, acc):  # the accumulator feeds the next query: no layer is skipped
            cache = KVCache(k=k, v=v, valid=valid, positions=slot_pos)
            _, _, out = cpu_attention.cpu_decode_state(
                q + 0 * acc[..., :1], cache, i, bound, q_pos, None, 0.125, None
            )
            return acc + out

        return jax.lax.fori_loop(0, LAYERS, layer, jnp.zeros_like(q))

    jax.block_until_ready(step(q, k, v))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(q, k, v))
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--slots", type=int, default=2048)
    ap.add_argument("--written", type=int, default=1200)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    if not cpu_attention._ensure_registered():  # built and registered whatever the mode
        raise SystemExit("the CPU attention kernel cannot build here (no C++ compiler?)")
    cores = os.cpu_count() or 1
    one, all_cores = read_bandwidth(1), read_bandwidth(cores)
    print(f"read bandwidth: {one / 1e9:.1f} GB/s on 1 thread, {all_cores / 1e9:.1f} on {cores}")
    print(f"{'rows':>5}{'ms/step':>10}{'GB/s':>8}{'of read bandwidth':>20}")
    for rows in [int(r) for r in args.rows.split(",")]:
        t = step_time(rows, args.slots, args.written, args.repeats)
        read = 2 * LAYERS * rows * KV_HEADS * HEAD_DIM * args.written * 4  # K and V, float32
        print(f"{rows:>5}{t * 1e3:>10.1f}{read / t / 1e9:>8.1f}{read / t / all_cores:>19.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
