"""The scoring progress bar: tokens, not requests, and an ETA from the rate once compiling is over.

    bar = TokenProgress("loglikelihood", tokens=plan.real_tokens, requests=n, compiles=k)
    bar.batch_done(requests=120, tokens=40_960)       # after each batch's results arrive
    bar.close()

A scoring run is a few large batches of very different lengths, and its first batch waits for its
executable to compile. Counted in requests, the bar sits at 0% through the compile, then jumps by
batches whose cost differs tenfold (a batch of 2,048-token rows holds few requests, one of 64-token
rows many), and tqdm's smoothed rate swings the ETA with each jump. Here the bar counts the real
tokens the plan scores (what the device's time follows), says "compiling N executables" until
the first batch is back, and gives an ETA only from the second batch on: the tokens since the
first batch over the time since it, so the first compile is never part of the rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tqdm.auto import tqdm

BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tokens [{elapsed}{postfix}]"


def format_seconds(seconds: float) -> str:
    """`m:ss` (or `h:mm:ss`), as tqdm writes times."""
    return tqdm.format_interval(max(0.0, seconds))


class TokenProgress:
    """One scoring call's bar (module docstring); `disable` draws nothing but still counts."""

    def __init__(
        self,
        kind: str,
        *,
        tokens: int,
        requests: int,
        compiles: int = 0,
        disable: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.clock = clock
        self.total_tokens = max(1, int(tokens))
        self.total_requests = int(requests)
        self.tokens = 0
        self.requests = 0
        self.compiles = int(compiles)
        self.first: tuple[float, int] | None = None  # (time, tokens) when the first batch was back
        self.bar = tqdm(
            total=self.total_tokens,
            desc=f"Running {kind} requests",
            unit="tok",
            unit_scale=True,
            bar_format=BAR_FORMAT,
            disable=disable,
        )
        self.bar.set_postfix_str(self._status())

    def eta(self) -> float | None:
        """Seconds left at the rate since the first batch; None before a second batch is back."""
        if self.first is None or self.tokens <= self.first[1]:
            return None
        start, start_tokens = self.first
        rate = (self.tokens - start_tokens) / max(1e-9, self.clock() - start)
        return (self.total_tokens - self.tokens) / rate

    def _status(self) -> str:
        req = f"{self.requests}/{self.total_requests} requests"
        if self.first is None:
            if self.compiles:
                noun = "executable" if self.compiles == 1 else "executables"
                return f"{req}, compiling {self.compiles} {noun}"
            return req
        eta = self.eta()
        return req if eta is None else f"{req}, {format_seconds(eta)} left"

    def batch_done(self, *, requests: int, tokens: int) -> None:
        """One batch's results are back: `requests` answered, `tokens` real tokens scored."""
        self.requests += requests
        self.tokens += tokens
        if self.first is None:
            self.first = (self.clock(), self.tokens)
        self.bar.set_postfix_str(self._status(), refresh=False)
        self.bar.update(tokens)

    def close(self) -> None:
        self.bar.close()
