"""The weights' matmuls of one decode step, XLA:CPU against numpy's BLAS, at SmolLM2-135M shapes.

    python bench/bench_decode_matmul.py [--rows 1,8] [--repeats 7]

A decode step reads every weight once for M rows (M = the batch's live rows). This times only the
matmuls of that step (30 layers of q/k/v/o, gate/up/down, then the 49,152-row head; 538 MB of
float32, random weights of the real shapes), as `jax.jit` of a `lax.scan` over the layers and as a
numpy loop over the same arrays, and prints both in ms and GB/s of weights read, and their ratio.
It is the floor under `bench_decode_step.py`'s no-cache step: attention and norms come on top.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

LAYERS, WIDTH, KV_WIDTH, FFN, VOCAB = 30, 576, 192, 1536, 49152
SHAPES = {
    "q": (WIDTH, WIDTH),
    "k": (WIDTH, KV_WIDTH),
    "v": (WIDTH, KV_WIDTH),
    "o": (WIDTH, WIDTH),
    "gate": (WIDTH, FFN),
    "up": (WIDTH, FFN),
    "down": (FFN, WIDTH),
}


def _layer(x, w, xp):
    q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]
    mixed = q + xp.pad(k + v, ((0, 0), (0, WIDTH - KV_WIDTH)))
    x = x + mixed @ w["o"]
    gate = x @ w["gate"]
    return x + (gate / (1 + xp.exp(-gate)) * (x @ w["up"])) @ w["down"]


@jax.jit
def _xla_step(x, layers, head):
    x, _ = jax.lax.scan(lambda h, w: (_layer(h, w, jnp), None), x, layers)
    return x @ head


def _numpy_step(x, layers, head):
    with np.errstate(over="ignore"):  # exp(-gate) of a random model's large activations
        for i in range(LAYERS):
            x = _layer(x, {k: v[i] for k, v in layers.items()}, np)
    return x @ head


def _best(fn, repeats: int) -> float:
    fn()  # compile / warm caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,8", help="comma-separated row counts M")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    layers = {
        k: (rng.standard_normal((LAYERS, *s), dtype=np.float32) * 0.02) for k, s in SHAPES.items()
    }
    head = rng.standard_normal((WIDTH, VOCAB), dtype=np.float32) * 0.02
    nbytes = sum(w.nbytes for w in layers.values()) + head.nbytes
    xla_layers, xla_head = jax.tree.map(jnp.asarray, (layers, head))
    print(f"weights {nbytes / 1e6:.0f} MB, float32, {jax.devices()[0].platform}")
    print("| rows | XLA ms | XLA GB/s | numpy ms | numpy GB/s | XLA / numpy time |")
    print("|---|---|---|---|---|---|")
    for m in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((m, WIDTH), dtype=np.float32)
        t_xla = _best(
            lambda x=x: _xla_step(x, xla_layers, xla_head).block_until_ready(), args.repeats
        )
        t_np = _best(lambda x=x: _numpy_step(x, layers, head), args.repeats)
        print(
            f"| {m} | {t_xla * 1e3:.1f} | {nbytes / t_xla / 1e9:.1f} | {t_np * 1e3:.1f} |"
            f" {nbytes / t_np / 1e9:.1f} | {t_xla / t_np:.2f}x |"
        )


if __name__ == "__main__":
    main()
