"""The scoring bar: tokens, a compiling line until the first batch, an ETA that holds still."""

from __future__ import annotations

import pytest

from jaxeval.lm.progress import TokenProgress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(batches, *, compile_s, rate):
    """(ETA after each batch, true time left) for batches of (requests, tokens) at `rate` tokens/s
    after a first compile of `compile_s` seconds."""
    clock = Clock()
    total = sum(t for _, t in batches)
    bar = TokenProgress(
        "loglikelihood",
        tokens=total,
        requests=sum(r for r, _ in batches),
        compiles=3,
        disable=True,
        clock=clock,
    )
    assert "compiling 3 executables" in bar._status()
    clock.now = compile_s
    out, done = [], 0
    for requests, tokens in batches:
        clock.now += tokens / rate
        done += tokens
        bar.batch_done(requests=requests, tokens=tokens)
        out.append((bar.eta(), (total - done) / rate))
    bar.close()
    return bar, out


def test_the_bar_counts_tokens_and_requests():
    bar, _ = _run([(400, 4_000), (10, 20_000), (90, 6_000)], compile_s=30, rate=1_000)
    assert bar.tokens == bar.total_tokens == 30_000 and bar.requests == 500
    assert "500/500 requests" in bar._status()


def test_eta_holds_still_through_a_long_compile_and_uneven_batches():
    # the lengths a run mixes: many short requests per batch, then few long ones
    batches = [(512, 9_000), (16, 30_000), (256, 12_000), (8, 28_000), (300, 11_000), (4, 25_000)]
    _, out = _run(batches, compile_s=60, rate=1_500)
    assert out[0][0] is None  # one batch is no rate: no ETA rather than one with the compile in it
    for eta, left in out[1:]:
        assert eta == pytest.approx(left, rel=1e-9)  # a steady device: the ETA is exact


def test_eta_without_a_second_batch_is_unknown():
    _, out = _run([(10, 5_000)], compile_s=5, rate=100)
    assert out == [(None, 0.0)]
