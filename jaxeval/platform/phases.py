"""Where a run's wall time goes: named phases on the main thread, each second counted once.

    phases.begin_run(phases.run_start())  # the `jaxeval` command: from its process start; else now
    with phases.phase("tokenize"):
        ...                                        # seconds land in "tokenize"
        with phases.phase("device"):               # nested: "tokenize" pauses meanwhile
            ...
    phases.current().block() -> {"wall_s": 12.1, "phases_s": {"startup": 1.9, ...},
                                "compiles": 2, "unaccounted_s": 0.1, "bound": "host", ...}

Phases are exclusive: entering a phase pauses the one around it, so the phase seconds add up to
the time spent inside any phase, and `wall_s - sum(phases_s)` is what no phase claimed
(`unaccounted_s`). Only the main thread's time counts (the wall clock a user waits on); a phase
entered on another thread (the background compile thread, a tokenizer pool) does nothing. With no
run begun, `phase` does nothing at all, so library code can mark its phases unconditionally.

The phases, in the order a run meets them:

    startup   process start to the run's start: imports, argument checks (0 for an API call)
    data      tasks loaded: YAML, datasets read
    model     weights and tokenizer loaded, placed on the devices
    prompts   requests built: documents rendered through the templates, few-shot examples
    tokenize  request strings to token ids
    plan      requests truncated, packed into rows, grouped into buckets
    compile   waiting for an executable (compiled, or loaded from the persistent cache)
    dispatch  batches built, sent to the devices, answers placed (host work feeding the device)
    device    waiting for the devices' results
    metrics   filters, per-document metrics, aggregation, samples records
    stderr    standard errors (bootstrap included)
    write     results and samples files written

On an accelerator, `device` is the chip's share; everything else is the host's. `bound` says which
was larger.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PHASES: tuple[str, ...] = (
    "startup",
    "data",
    "model",
    "prompts",
    "tokenize",
    "plan",
    "compile",
    "dispatch",
    "device",
    "metrics",
    "stderr",
    "write",
)


def process_start() -> float:
    """This process's start as a `time.time()` value (Linux: from /proc, to 10 ms; else the import
    of this module, which the `jaxeval` command reaches within a few milliseconds of starting)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat(5): since boot
        with open("/proc/uptime", encoding="ascii") as f:
            up = float(f.read().split()[0])  # seconds since boot, on the same clock
        return time.time() - max(0.0, up - started)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def mark_command() -> None:
    """Called by the `jaxeval` command's entry point: a run's clock then starts at the process's
    start (imports included). A run called in a longer-lived process (a notebook, a test) starts
    its clock when the run starts."""
    global _COMMAND
    _COMMAND = True


def run_start() -> float:
    """Where the clock of a run starting now begins (see `mark_command`)."""
    return process_start() if _COMMAND else time.time()


_COMMAND = False
_IMPORTED = time.time()


class PhaseClock:
    """The seconds of each phase of one run, from `start` (a `time.time()` value) on."""

    def __init__(self, start: float | None = None):
        now = time.time()
        self.start = now if start is None else min(start, now)
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.seconds["startup"] = now - self.start
        self.compiles = 0
        self.counts: dict[str, int] = {}
        self._stack: list[list[Any]] = []  # entered phases: name, start; innermost last
        self._lock = threading.Lock()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; the phases are {PHASES}")
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        now = time.perf_counter()
        if self._stack:
            outer = self._stack[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._stack.append([name, now])
        try:
            yield
        finally:
            now = time.perf_counter()
            inner = self._stack.pop()
            self.seconds[inner[0]] += now - inner[1]
            if self._stack:
                self._stack[-1][1] = now

    def count(self, what: str, n: int = 1) -> None:
        """Adds `n` to the counter `what` (any thread): scored_tokens, generated_tokens, ..."""
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def wall(self) -> float:
        return time.time() - self.start

    def block(self) -> dict[str, Any]:
        """The `timing` block of a results file, as of now."""
        wall = self.wall()
        seconds = dict(self.seconds)
        if self._stack:  # the phase open now (made inside "write"): its seconds so far
            name, since = self._stack[-1]
            seconds[name] += time.perf_counter() - since
        phases = {k: round(v, 3) for k, v in seconds.items()}
        device = seconds["device"]
        host = sum(seconds.values()) - device
        return {
            "wall_s": round(wall, 3),
            "phases_s": phases,
            "unaccounted_s": round(wall - sum(seconds.values()), 3),
            "host_s": round(host, 3),
            "device_s": round(device, 3),
            "bound": "device" if device > host else "host",
            "compiles": self.counts.get("compiles", 0),
            "scored_tokens": self.counts.get("scored_tokens", 0),
            "generated_tokens": self.counts.get("generated_tokens", 0),
        }


_RUN: PhaseClock | None = None


def begin_run(start: float | None = None) -> PhaseClock:
    """Starts the clock of a run (replacing any), `start` defaulting to now; returns it."""
    global _RUN
    _RUN = PhaseClock(start)
    return _RUN


def end_run() -> None:
    global _RUN
    _RUN = None


def current() -> PhaseClock | None:
    """The clock of the run in progress (None outside a run)."""
    return _RUN


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Counts the time inside in phase `name` of the current run (nothing outside a run)."""
    clock = _RUN
    if clock is None:
        yield
        return
    with clock.phase(name):
        yield


def count(what: str, n: int = 1) -> None:
    """Adds `n` to the current run's counter `what` (nothing outside a run)."""
    clock = _RUN
    if clock is not None:
        clock.count(what, n)


def summary_line(block: dict[str, Any]) -> str:
    """One line for the end of a run: the wall time, then every phase over 1% of it, largest first.

    summary_line({"wall_s": 10.0, "phases_s": {"device": 6.0, "tokenize": 2.0, ...}, ...})
    -> 'time 10.0 s: device 6.0, tokenize 2.0, ... (host-bound: 4.0 s host, 6.0 s device; 2 compiles)'
    """
    wall = block["wall_s"]
    parts = sorted(block["phases_s"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v:.1f}" for k, v in parts if v >= 0.01 * wall)
    return (
        f"time {wall:.1f} s: {shown} ({block['bound']}-bound: {block['host_s']:.1f} s host, "
        f"{block['device_s']:.1f} s device; {block['compiles']} compiles)"
    )
