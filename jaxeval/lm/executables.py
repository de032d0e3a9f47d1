"""The compile boundary: every executable a model adapter runs, compiled ahead of time in one place.

    exe = Executables()                                   # one per Scorer, one per Generator
    job = Job(key, fn, args, in_shardings=..., out_shardings=...)
    exe.ahead([job, ...])   # queued on the one background compile thread, in this order
    run = exe.get(job)      # the executable: compiled before, waited for, or compiled now
    exe.stats()             # {compile_count, compilations, cache_hits, compile_s, compile_wait_s}
    exe.describe(key)       # memory and cost analysis of a compiled executable
    Executables("plan", compiler_options={...})   # every compile with these XLA options

This is the only place that calls `jax.jit(...).lower(...)` and `.compile()` on a kernel
(`tests/test_architecture.py` checks it): the scorer, the generator, the continuous engine and the
TPU planner (`jaxeval.plan`) all hand it `Job`s.

A `Job` is everything `jax.jit(fn, ...).lower(*args).compile()` needs: `args` are abstract
(`jax.ShapeDtypeStruct`s carrying their `NamedSharding`s) or concrete arrays (only their shapes,
dtypes and shardings are read), `key` names the executable (a bucket, a generation shape, an engine
piece). Nothing is ever compiled twice for one key.

**Counters.** `compilations` counts executables XLA built, `cache_hits` those loaded from disk:
from JAX's persistent cache (`jaxeval.platform.compile_cache`) or, without tracing or lowering
them, from the executable store (`jaxeval.lm.executable_store`, `store_loads`; executables
made with `store=True`: the scorer's and the generator's), `compile_s` the seconds spent in either (on any thread),
`compile_wait_s` the seconds a caller of `get` waited for an executable it needed (its own compile
included). Both compile paths (the thread and a caller compiling at once) count through
`CompileCounter`, which attributes each compile event to the thread that compiled, so counts stay
exact while the two compile at the same time.

**Abstract mode.** Jobs whose arguments are `ShapeDtypeStruct`s on any mesh (a mesh of TPU devices
from `jax.experimental.topologies` included) compile without allocating an array: that is how a
planner compiles every executable a run would use for a machine it is not on (`Scorer` with
abstract parameters, then `Scorer.warmup`), and reads `describe`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax

from jaxeval.lm.executable_store import ExecutableStore, cache_reads
from jaxeval.platform import phases
from jaxeval.platform.compile_cache import CompileCounter


@dataclasses.dataclass(frozen=True, eq=False)
class Job:
    """One executable to compile: its name, function, (abstract) arguments and `jax.jit` options."""

    key: Hashable
    fn: Callable
    args: tuple
    in_shardings: Any = None
    out_shardings: Any = None
    donate_argnums: tuple[int, ...] = ()

    def lower(self) -> Any:
        """`jax.jit(fn, shardings).lower(*args)`: the StableHLO, before XLA compiles it."""
        options: dict[str, Any] = {"donate_argnums": self.donate_argnums}
        if self.in_shardings is not None:
            options["in_shardings"] = self.in_shardings
        if self.out_shardings is not None:
            options["out_shardings"] = self.out_shardings
        return jax.jit(self.fn, **options).lower(*self.args)


class Executables:
    """key -> compiled executable, one compile-ahead thread, one set of counters (module docstring)."""

    def __init__(
        self,
        name: str = "jaxeval-compile",
        *,
        compiler_options: dict | None = None,
        store: bool = False,
    ):
        self.name = name
        self.compiler_options = dict(compiler_options) if compiler_options else None
        self.use_store = store  # load and keep executables in the `ExecutableStore`
        self._compiled: dict[Hashable, Any] = {}
        self._pending: dict[Hashable, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.compilations = 0  # executables XLA built
        self.cache_hits = 0  # executables loaded from disk (either cache)
        self.store_loads = 0  # of which from the executable store (nothing traced or lowered)
        self.compile_seconds = 0.0  # spent compiling (or loading), on any thread
        self.compile_wait_seconds = 0.0  # of which callers of `get` waited for

    def __contains__(self, key: Hashable) -> bool:
        return key in self._compiled

    def __len__(self) -> int:
        return len(self._compiled)

    @property
    def compile_count(self) -> int:
        """Distinct executables compiled (or loaded) so far."""
        return len(self._compiled)

    def compiled(self, key: Hashable) -> Any:
        """The executable already compiled for `key` (KeyError if none)."""
        return self._compiled[key]

    def keys(self) -> list[Hashable]:
        return list(self._compiled)

    def options_for(self, job: Job) -> dict | None:
        """The compiler options of `job`: the platform's (`PLATFORM_OPTIONS`), then this
        instance's on top."""
        options = {}
        for platform in job_platforms(job):
            options.update(PLATFORM_OPTIONS.get(platform, {}))
        options.update(self.compiler_options or {})
        return options or None

    def _build(self, job: Job) -> Any:
        counter = CompileCounter.get()
        before = counter.snapshot(thread=True)
        start = time.perf_counter()
        options = self.options_for(job)
        store = ExecutableStore.for_compile_cache() if self.use_store else None
        digest = store.fingerprint(job, options) if store is not None else None
        executable = store.load(digest, job.args) if digest is not None else None
        loaded = executable is not None
        lowered = None
        read: list[bytes] = []
        if not loaded:
            lowered = job.lower()
            with cache_reads() as read:
                executable = lowered.compile(compiler_options=options)
        built, hits = counter.since(before, thread=True)
        if digest is not None and lowered is not None:
            if built and not hits:  # XLA compiled it now
                store.save(digest, job.args, executable, lowered)
            elif hits == 1 and not built and len(read) == 1:  # from JAX's cache: its own bytes
                store.save(digest, job.args, executable, lowered, serialized=read[0])
        seconds = time.perf_counter() - start
        with self._lock:
            self.compile_seconds += seconds
            self.compilations += built
            self.cache_hits += hits + loaded
            self.store_loads += loaded
        return executable

    def ahead(self, jobs: Iterable[Job]) -> None:
        """Queues every job not compiled or queued yet on the background thread, in order."""
        for job in jobs:
            if job.key in self._compiled or job.key in self._pending:
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name)
            self._pending[job.key] = self._pool.submit(self._build, job)

    def get(self, job: Job) -> Any:
        """The executable for `job.key`: compiled before, compiled ahead (waited for), or now."""
        if job.key not in self._compiled:
            start = time.perf_counter()
            pending = self._pending.pop(job.key, None)
            with phases.phase("compile"):
                built = pending.result() if pending is not None else self._build(job)
            self._compiled[job.key] = built
            self.compile_wait_seconds += time.perf_counter() - start
            phases.count("compiles")
        return self._compiled[job.key]

    def cancel_pending(self) -> None:
        """Drops the queued compiles the thread has not started (they are not needed after all)."""
        for key in [k for k, f in self._pending.items() if f.cancel()]:
            del self._pending[key]

    def stats(self) -> dict[str, float]:
        return {
            "compile_count": self.compile_count,
            "compilations": self.compilations,
            "cache_hits": self.cache_hits,
            "store_loads": self.store_loads,
            "compile_s": self.compile_seconds,
            "compile_wait_s": self.compile_wait_seconds,
        }

    def describe(self, key: Hashable) -> dict[str, float]:
        """What XLA says of a compiled executable: bytes of arguments, outputs, temporaries and
        code per device (`memory_analysis`), and FLOPs and bytes accessed (`cost_analysis`)."""
        return describe_compiled(self._compiled[key])

    def text(self, key: Hashable) -> str:
        """The compiled executable's optimized HLO module, as text."""
        return self._compiled[key].as_text()


# Compiler options per platform, for every executable (a run's and the planner's alike).
# TPU: no windowed einsum (XLA's collective matmul, which splits a matmul whose weights are
# all-gathered into a loop of partial matmuls and adds over the whole output). With fsdp-sharded
# weights the layer's all-gathers already overlap the compute as asynchronous collectives, and the
# loop's adds cost more than they hide: Llama-3-8B's 2,048-token scoring buckets on a v5e-8 are
# 2.67 G -> 1.15 G cycles by the compiler's own estimate (`estimated_cycles`), generation
# unchanged.
PLATFORM_OPTIONS: dict[str, dict[str, Any]] = {
    "tpu": {"xla_jf_spmd_threshold_for_windowed_einsum_mib": 1 << 20},
}


def job_platforms(job: Job) -> set[str]:
    """The platforms of the devices `job`'s arguments are placed on (empty: none say)."""
    shardings = [getattr(x, "sharding", None) for x in jax.tree.leaves(job.args)]
    return {d.platform for s in shardings if s is not None for d in s.device_set}


def describe_compiled(compiled: Any) -> dict[str, float]:
    """`Executables.describe` of one compiled executable (module docstring)."""
    out: dict[str, float] = {}
    memory = compiled.memory_analysis()
    for name in ("argument", "output", "temp", "alias", "generated_code"):
        value = getattr(memory, f"{name}_size_in_bytes", None)
        if value is not None:
            out[f"{name}_bytes"] = float(value)
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax: one dict per program
        cost = cost[0] if cost else {}
    for name in ("flops", "bytes accessed", "transcendentals"):
        if cost and name in cost:
            out[name.replace(" ", "_")] = float(cost[name])
    return out
