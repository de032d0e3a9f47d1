"""The bootstrap's index stream equals `random.Random(i).choices`, draw for draw."""

import random

import numpy as np
import pytest

from jaxeval.metrics.resample import (
    chunking,
    python_random_generator,
    replicate_index_blocks,
)


def reference_indices(iters: int, n: int) -> list[list[int]]:
    """lm-eval's loop, drawing indices instead of documents."""
    chunk = min(1000, iters)
    rows = []
    for i in range(iters // chunk):
        rnd = random.Random(i)
        rows.extend(rnd.choices(range(n), k=n) for _ in range(chunk))
    return rows


def all_rows(iters: int, n: int, **kw) -> list[list[int]]:
    return [row for block in replicate_index_blocks(iters, n, **kw) for row in block.tolist()]


def test_module_docstring_example():
    rnd = random.Random(0)
    assert [round(rnd.random(), 3) for _ in range(6)] == [0.844, 0.758, 0.421, 0.259, 0.511, 0.405]
    assert all_rows(2, 3) == [[2, 2, 1], [0, 1, 1]]


@pytest.mark.parametrize("seed", [0, 1, 7, 99, 1000, 2**31, 2**32 - 1, 2**32, 2**40 + 5, 2**70 + 3])
def test_generator_doubles_equal_python_random(seed):
    rnd = random.Random(seed)
    expected = [rnd.random() for _ in range(3000)]  # crosses several MT19937 twists (312 each)
    assert python_random_generator(seed).random(3000).tolist() == expected


@pytest.mark.parametrize(
    "iters,n",
    [
        (5, 1),  # floor(random() * 1.0) == 0, but every replicate still consumes its draw
        (7, 2),
        (2500, 3),  # two seeds of 1,000 replicates, 500 dropped
        (5000, 2),  # seeds 0 to 4
        (13, 7),
        (30, 60),
        (4, 1000),
        (3, 1024),  # a power of two
        (9, 5153),  # LAMBADA's size
    ],
)
@pytest.mark.parametrize("native", [True, False])  # the C++ kernel where it builds; NumPy
def test_indices_equal_random_choices(iters, n, native):
    expected = reference_indices(iters, n)
    assert all_rows(iters, n, native=native) == expected
    # Blocks that split a chunk unevenly (3 rows, then the remainder) give the same rows.
    assert all_rows(iters, n, block_elements=3 * n + 1, native=native) == expected


@pytest.mark.parametrize("native", [True, False])
def test_blocks_are_bounded_and_ordered(native):
    shapes = [b.shape for b in replicate_index_blocks(2500, 60, block_elements=600, native=native)]
    assert shapes == ([(10, 60)] * 100) * 2  # 10 rows per block, 1,000 per seed, 2 seeds
    # A population larger than a block still gets one row per block.
    blocks = replicate_index_blocks(3, 70, block_elements=50, native=native)
    assert {b.shape for b in blocks} == {(1, 70)}
    block = next(replicate_index_blocks(10, 5153, native=native))
    assert block.dtype == np.int64 and 0 <= block.min() and block.max() < 5153


@pytest.mark.parametrize(
    "iters,expected",
    [(1, (1, 1)), (7, (7, 1)), (1000, (1000, 1)), (2500, (1000, 2)), (100_000, (1000, 100))],
)
def test_chunking_is_lm_evals(iters, expected):
    assert chunking(iters) == expected


@pytest.mark.parametrize("iters,n", [(0, 5), (10, 0), (-3, 5)])
def test_empty_streams_are_refused(iters, n):
    with pytest.raises(ValueError):
        next(replicate_index_blocks(iters, n))
