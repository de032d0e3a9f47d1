"""Which documents each bootstrap replicate draws: lm-eval's `random.Random` stream, from NumPy.

lm-eval 0.4.13's bootstrap draws replicate after replicate with `rnd.choices(xs, k=len(xs))`, where
chunk i of `min(1000, iters)` replicates uses `rnd = random.Random(i)`. Without weights, CPython's
`choices` is `[xs[floor(rnd.random() * n)] for _ in range(k)]` with `n = float(len(xs))`: one
`random()` per document and no `_randbelow`. So replicate r of a chunk reads that chunk's doubles
`r*n ... r*n + n - 1`, in order:

    n = 3, chunk = 2, random() stream of Random(0) = 0.844, 0.758, 0.421, 0.259, 0.511, 0.405, ...
    replicate 0 <- floor(3 * [0.844, 0.758, 0.421]) = [2, 2, 1]
    replicate 1 <- floor(3 * [0.259, 0.511, 0.405]) = [0, 1, 1]

`random.Random(i)` seeds MT19937 with `init_by_array` over the 32-bit words of `abs(i)`, as does
NumPy's legacy `RandomState([words])`; NumPy's `Generator.random` on that bit generator builds each
double as CPython's `random()` does, `((a >> 5) * 2**26 + (b >> 6)) / 2**53`. And `u * n` with
`u = K / 2**53` rounds exactly as `K * n` does, so `floor(u * n)` is the same index (and below `n`
for any `n` < 2**53). `tests/metrics/test_bootstrap_vectorised.py` checks all of this against
`random.Random(i).choices` itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

BOOTSTRAP_CHUNK = 1000
# Indices per yielded block (2 MiB of int64): big enough for NumPy to run at full speed, small
# enough that a block and its gathered values stay in cache whatever `iters * n` is.
BLOCK_ELEMENTS = 1 << 18


def chunking(iters: int) -> tuple[int, int]:
    """lm-eval's `(chunk, chunks)`: `chunk = min(1000, iters)` replicates per seed, seeds
    `0 .. iters // chunk - 1` (iters=2500 -> (1000, 2): 2000 replicates, the rest dropped)."""
    chunk = min(BOOTSTRAP_CHUNK, iters)
    return chunk, iters // chunk


def python_random_generator(seed: int) -> np.random.Generator:
    """A NumPy generator whose `random()` doubles equal `random.Random(seed).random()`'s."""
    value = abs(int(seed))
    words = [0] if value == 0 else []
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    _, key, pos, _, _ = np.random.RandomState(words).get_state(legacy=True)
    bit_generator = np.random.MT19937()
    bit_generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": pos}}
    return np.random.Generator(bit_generator)


def replicate_index_blocks(
    iters: int, n: int, *, block_elements: int = BLOCK_ELEMENTS
) -> Iterator[np.ndarray]:
    """The documents each replicate draws, as int64 blocks with one row per replicate.

    Rows come in lm-eval's replicate order (seed 0's chunk, then seed 1's, ...), each block at most
    `block_elements` indices (at least one row), and row r of all blocks together holds the `n`
    indices `random.Random(r // chunk).choices(range(n), k=n)` would give after `r % chunk` earlier
    calls. `n` must be at least 1 and `iters` at least 1.

    Every block is a view of one buffer that the next block overwrites (so that the memory is
    touched once, not once per block): use each block before asking for the next, or copy it.
    """
    if n < 1 or iters < 1:
        raise ValueError(f"need n >= 1 and iters >= 1, got n={n}, iters={iters}")
    chunk, chunks = chunking(iters)
    rows = max(1, min(chunk, block_elements // n))
    draws = np.empty((rows, n), dtype=np.float64)  # one replicate per row, one draw per document
    indices = np.empty((rows, n), dtype=np.int64)
    scale = float(n)
    for seed in range(chunks):
        generator = python_random_generator(seed)
        left = chunk
        while left:
            take = min(rows, left)
            generator.random(out=draws[:take])
            np.multiply(draws[:take], scale, out=draws[:take])
            np.copyto(indices[:take], draws[:take], casting="unsafe")  # truncation: draws are >= 0
            yield indices[:take]
            left -= take
