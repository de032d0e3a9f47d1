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

The draws come from the C++ kernel (`jaxeval.metrics.bootstrap_kernel`: the same stream and
arithmetic, ~7x faster than NumPy's generator) when it builds, else from NumPy; `native=False`
asks for NumPy. For statistics that are functions of row sums, `replicate_row_sums` leaves the
indices in the kernel and returns every replicate's sums.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from jaxeval.metrics import bootstrap_kernel

BOOTSTRAP_CHUNK = 1000
# Indices per yielded block (2 MiB of int64): big enough for NumPy to run at full speed, small
# enough that a block and its gathered values stay in cache whatever `iters * n` is.
BLOCK_ELEMENTS = 1 << 18
# The kernel's seeds run on up to MAX_THREADS threads once a bootstrap draws PARALLEL_DRAWS.
MAX_THREADS = 16
PARALLEL_DRAWS = 1 << 22


def chunking(iters: int) -> tuple[int, int]:
    """lm-eval's `(chunk, chunks)`: `chunk = min(1000, iters)` replicates per seed, seeds
    `0 .. iters // chunk - 1` (iters=2500 -> (1000, 2): 2000 replicates, the rest dropped)."""
    chunk = min(BOOTSTRAP_CHUNK, iters)
    return chunk, iters // chunk


def seed_key(seed: int) -> list[int]:
    """The 32-bit words `random.seed(seed)` feeds `init_by_array`: those of abs(seed), least
    significant first, [0] for 0 (2**32 + 5 -> [5, 1])."""
    value = abs(int(seed))
    words = [0] if value == 0 else []
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return words


def python_random_generator(seed: int) -> np.random.Generator:
    """A NumPy generator whose `random()` doubles equal `random.Random(seed).random()`'s."""
    _, key, pos, _, _ = np.random.RandomState(seed_key(seed)).get_state(legacy=True)
    bit_generator = np.random.MT19937()
    bit_generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": pos}}
    return np.random.Generator(bit_generator)


def _kernel(n: int, native: bool) -> ctypes.CDLL | None:
    """The loaded kernel library when `native` and it applies to `n` documents, else None."""
    if not native or n > bootstrap_kernel.MAX_DOCUMENTS:
        return None
    return bootstrap_kernel.load_kernel()


def _numpy_draws(seed: int, n: int) -> Callable[[np.ndarray, np.ndarray], None]:
    generator = python_random_generator(seed)
    scale = float(n)

    def fill(indices: np.ndarray, draws: np.ndarray) -> None:
        generator.random(out=draws)
        np.multiply(draws, scale, out=draws)
        np.copyto(indices, draws, casting="unsafe")  # truncation: draws are >= 0

    return fill


def _kernel_draws(lib: ctypes.CDLL, seed: int, n: int) -> Callable[[np.ndarray, np.ndarray], None]:
    stream = bootstrap_kernel.Stream(lib, seed_key(seed))
    return lambda indices, _draws: stream.indices(n, indices)


def replicate_index_blocks(
    iters: int, n: int, *, block_elements: int = BLOCK_ELEMENTS, native: bool = True
) -> Iterator[np.ndarray]:
    """The documents each replicate draws, as int64 blocks with one row per replicate.

    Rows come in lm-eval's replicate order (seed 0's chunk, then seed 1's, ...), each block at most
    `block_elements` indices (at least one row), and row r of all blocks together holds the `n`
    indices `random.Random(r // chunk).choices(range(n), k=n)` would give after `r % chunk` earlier
    calls. `n` must be at least 1 and `iters` at least 1. Drawn by the kernel where it is
    available and `native`, else by NumPy: the same indices.

    Every block is a view of one buffer that the next block overwrites (so that the memory is
    touched once, not once per block): use each block before asking for the next, or copy it.
    """
    if n < 1 or iters < 1:
        raise ValueError(f"need n >= 1 and iters >= 1, got n={n}, iters={iters}")
    chunk, chunks = chunking(iters)
    rows = max(1, min(chunk, block_elements // n))
    lib = _kernel(n, native)
    # one replicate per row, one draw per document (NumPy's doubles: none for the kernel)
    draws = np.empty((0, n) if lib else (rows, n), dtype=np.float64)
    indices = np.empty((rows, n), dtype=np.int64)
    for seed in range(chunks):
        fill = _kernel_draws(lib, seed, n) if lib else _numpy_draws(seed, n)
        left = chunk
        while left:
            take = min(rows, left)
            fill(indices[:take], draws[:take])
            yield indices[:take]
            left -= take


def replicate_row_sums(
    columns: Sequence[np.ndarray], iters: int, *, compensated: bool, native: bool = True
) -> list[np.ndarray] | None:
    """Every replicate's sum of each column, or None where the kernel is unavailable (or not
    `native`): `out[k][r] = sum(columns[k][i] for i in replicate r's indices)`, the indices of
    `replicate_index_blocks`, added as `replicate_stats.python_row_sums` adds them (`compensated`:
    Neumaier's sum, Python 3.12's; else left to right). `columns` are [n] float64 values sharing
    the draws (a weighted aggregation's values and weights); each result is [chunk * chunks].
    """
    n = len(columns[0])
    if n < 1 or iters < 1:
        raise ValueError(f"need n >= 1 and iters >= 1, got n={n}, iters={iters}")
    lib = _kernel(n, native)
    if lib is None:
        return None
    chunk, chunks = chunking(iters)
    columns = [np.ascontiguousarray(c, dtype=np.float64) for c in columns]
    out = [np.empty(chunk * chunks, dtype=np.float64) for _ in columns]

    def one_seed(seed: int) -> None:  # its own stream and its own rows of `out`
        part = [o[seed * chunk : (seed + 1) * chunk] for o in out]
        stream = bootstrap_kernel.Stream(lib, seed_key(seed))
        stream.row_sums(n, chunk, columns, part, compensated=compensated)

    # Seeds are independent streams: one per thread (ctypes lets go of the GIL during the call),
    # the same numbers in any order.
    workers = min(chunks, os.cpu_count() or 1, MAX_THREADS)
    if workers < 2 or n * chunk * chunks < PARALLEL_DRAWS:
        for seed in range(chunks):
            one_seed(seed)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one_seed, range(chunks)))
    return out
