"""Compiling a planned executable for a TPU slice and reading back what the compiler says.

    compiled = compile_job(job, name=..., kind="score", tokens=..., useful=...)   # a `Compiled`
    flops, nbytes = layer_costs(build, spec, runtime, mesh, dtype)   # every layer counted
    flops, nbytes, once = step_costs(steps, spec, runtime, mesh, dtype)   # one step of a loop

Every compile goes through `jaxeval.lm.executables.Executables`, the one compile boundary (the
counting compiles with `COUNTING_OPTIONS`). Per executable, per chip:

    HBM       arguments + outputs - donated + temporaries (the compiler's `memory_analysis`),
              against what the compiler lets a program use on the chip (`Chip.allowed_hbm_bytes`)
    FLOPs     the compiler's `cost_analysis`, every layer counted (`layer_costs`; a scanned layer
              body counts once otherwise)
    roofline  max(FLOPs / peak, bytes / HBM bandwidth): a bound, not a measurement
    estimate  the compiler's own cost model: its `estimated_cycles` per fusion and op, summed over
              the optimized HLO with loops counted by their trip counts (`estimated_cycles`),
              over the chip's clock, plus the kernels it gives no cycles (Pallas and Mosaic
              `tpu_custom_call`s: attention, the grouped expert matmuls) at the roofline of
              the FLOPs and bytes each declares (`kernel_costs`); nearer a device time than
              the roofline, still not a measurement
    HLO       collectives, Pallas kernels (tpu_custom_call), CPU custom calls, host transfers
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from jaxeval.lm.executables import Executables, Job
from jaxeval.models.runtime import Runtime
from jaxeval.models.sharding import param_shardings
from jaxeval.plan.topology import Topology

GIB = 1 << 30
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
CPU_TARGETS = ("jaxeval_decode_attention", "jaxeval_packed_attention")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Compiled:
    """One executable's figures per chip (module docstring); `error` when it did not compile."""

    name: str
    kind: str  # score, prefill or decode
    tokens: int  # tokens one call processes (all chips): rows x length, or rows for a decode step
    useful_flops: float  # per chip
    error: str | None = None
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    flops: float = 0.0
    bytes_accessed: float = 0.0
    collectives: dict[str, int] = dataclasses.field(default_factory=dict)
    pallas_kernels: int = 0
    cpu_custom_calls: int = 0
    host_transfers: int = 0
    compile_s: float = 0.0
    # FLOPs and bytes counted over every layer (`layer_costs`); False: the compiler's own counts,
    # which take a scanned layer body once, so the roofline and the ratios are not computed
    layers_counted: bool = True
    once_bytes: float = 0.0  # a loop's executable: bytes moved once per call, outside its steps
    cycles: float = 0.0  # the compiler's estimate for one call (`estimated_cycles`)
    kernel_flops: float = 0.0  # what the kernels without a cycle estimate declare (`kernel_costs`)
    kernel_bytes: float = 0.0
    count_error: str | None = None  # why the counting compiles failed (the compiler's counts then)
    cached: bool = False  # figures read from the plan's cache (`figures.FigureCache`), not compiled

    @property
    def hbm_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    def roofline_s(self, topo: Topology) -> float:
        return max(self.flops / topo.chip.peak_flops, self.bytes_accessed / topo.chip.hbm_bandwidth)

    def estimate_s(self, topo: Topology) -> float:
        """The compiler's cycle estimate in seconds at the chip's clock, plus the kernels it does
        not estimate at the roofline of what they declare."""
        kernels = max(
            self.kernel_flops / topo.chip.peak_flops, self.kernel_bytes / topo.chip.hbm_bandwidth
        )
        return self.cycles / topo.chip.clock_hz + kernels

    def fits(self, topo: Topology) -> bool:
        """Compiled, and within the HBM the compiler allows a program on the chip."""
        return self.error is None and self.hbm_bytes <= topo.chip.allowed_hbm_bytes

    def failure(self, topo: Topology) -> str | None:
        """None when it fits, else what failed: "hbm" (out of HBM: the compiler's
        RESOURCE_EXHAUSTED, or over the allowed HBM) or "compile" (any other compiler error)."""
        if self.error is not None:
            return "hbm" if "RESOURCE_EXHAUSTED" in self.error else "compile"
        return None if self.fits(topo) else "hbm"

    def summary(self, topo: Topology) -> dict[str, Any]:
        """The row of the table, as numbers (the JSON output)."""
        out = dataclasses.asdict(self)
        out.update(failure=self.failure(topo))
        if self.error is None:
            t = self.roofline_s(topo)
            out.update(
                hbm_bytes=self.hbm_bytes,
                allowed_hbm_bytes=topo.chip.allowed_hbm_bytes,
                nominal_hbm_bytes=topo.chip.hbm_bytes,
                fits=self.fits(topo),
            )
            estimate = self.estimate_s(topo)
            out.update(
                estimate_s=estimate,
                mfu_estimate=(
                    self.useful_flops / (estimate * topo.chip.peak_flops) if estimate else 0.0
                ),
            )
            if self.layers_counted:
                out.update(
                    roofline_s=t,
                    tokens_per_s=self.tokens / t if t else 0.0,
                    useful_over_compiled=self.useful_flops / self.flops if self.flops else 0.0,
                    mfu_bound=self.useful_flops / (t * topo.chip.peak_flops) if t else 0.0,
                )
        return out


def hlo_facts(text: str) -> dict[str, Any]:
    """Counts in an optimized HLO module's text: collectives (async pairs counted once), Pallas TPU
    kernels, our CPU custom calls, host transfers."""
    collectives = {}
    for op in COLLECTIVES:
        n = len(re.findall(rf" {op}(?:-start)?\(", text))  # async: -start counted, -done not
        if n:
            collectives[op] = n
    host = len(re.findall(r"is_host_transfer=true|custom_call_target=\"MoveToHost\"", text))
    host += len(re.findall(r"\bS\(5\)", text))  # the host memory space
    return {
        "collectives": collectives,
        "pallas_kernels": text.count('custom_call_target="tpu_custom_call"'),
        "cpu_custom_calls": sum(text.count(f'"{t}"') for t in CPU_TARGETS),
        "host_transfers": host,
    }


CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
HEADER = re.compile(r"^(ENTRY )?%?([^\s(]+)")
CONSTANT = re.compile(r"%([\w.\-]+) = s32\[\]\S* constant\((\d+)\)")
BOUND = re.compile(r"ROOT .* compare\(%([\w.\-]+), %([\w.\-]+)\), direction=LT")


KERNEL_FLOPS = re.compile(r'"cost_estimate":\{"flops":"(\d+)"')
KERNEL_BYTES = re.compile(r'"cost_estimate":\{[^}]*"bytes_accessed":"(\d+)"')


def _kernel_figure(pattern: re.Pattern) -> Callable[[str], float]:
    """A line's declared kernel figure (`pattern`), for a custom call with no cycle estimate."""

    def value(line: str) -> float:
        if " custom-call(" not in line or CYCLES.search(line):
            return 0.0
        m = pattern.search(line)
        return float(m[1]) if m else 0.0

    return value


def kernel_costs(text: str) -> tuple[float, float]:
    """(FLOPs, bytes) one call's kernels declare, counted as `estimated_cycles` counts (loops by
    their trip counts): the custom calls the compiler gives no `estimated_cycles` but a
    `cost_estimate` (Pallas and Mosaic kernels; XLA's grouped matmul declares its padded rows)."""
    return (
        _hlo_sum(text, _kernel_figure(KERNEL_FLOPS)),
        _hlo_sum(text, _kernel_figure(KERNEL_BYTES)),
    )


def estimated_cycles(text: str) -> float:
    """The TPU compiler's estimate of one call's cycles, from an optimized HLO module's text.

    Each fusion or op the compiler emits carries `"estimated_cycles":"N"` in its backend config;
    this sums them over the entry computation, entering what it calls: a `while` body counts
    its trip count times (the scanned layers: L times, though their body is written once, the
    same L that `layer_costs` extrapolates the FLOPs to; a windowed einsum's loop over weight
    shards), a `call` once, a `conditional` its dearest branch. A fusion's own estimate covers
    the computation it fuses. The trip count is the loop's `known_trip_count`, else the N of its
    condition `ROOT compare(%i, %N), direction=LT` with N a constant (a scan's counter runs from
    0 by 1), else 1. So, for

        ENTRY %main { %f = fusion(...), ..."estimated_cycles":"100"...
                      %w = while(...), condition=%cond, body=%body }
        %cond { %n = s32[] constant(30)  ROOT %lt = pred[] compare(%i, %n), direction=LT }
        %body { %g = fusion(...), ..."estimated_cycles":"7"... }

    the estimate is 100 + 30 x 7 = 310 cycles. A loop with a data-dependent end (the decode
    chunk's `while_loop` over steps, a device's passes over its expert assignments) counts once:
    one step, one pass. Kernels get no cycles here (`kernel_costs`).
    """

    def cycles(line: str) -> float:
        m = CYCLES.search(line)
        return float(m[1]) if m else 0.0

    return _hlo_sum(text, cycles)


def _hlo_sum(text: str, value: Callable[[str], float]) -> float:
    """`value(line)` summed over an optimized HLO module's entry computation and what it calls,
    loops by their trip counts (`estimated_cycles`'s walk)."""
    bodies: dict[str, list[str]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            m = HEADER.match(line)
            if m is None:
                continue
            current = m[2]
            bodies[current] = []
            entry = current if m[1] else entry
        elif line.startswith("}"):
            current = None
        elif current is not None:
            bodies[current].append(line)
    seen: dict[str, float] = {}

    def called(line: str, field: str) -> list[str]:
        m = re.search(rf"{field}=\{{?([^}},]+(?:, ?%[^}},]+)*)\}}?", line)
        return [] if m is None else [c.strip().lstrip("%") for c in m[1].split(",")]

    def trips(line: str) -> int:
        known = TRIP_COUNT.search(line)
        if known:
            return int(known[1])
        cond = "\n".join(bodies.get(next(iter(called(line, "condition")), ""), ()))
        constants = dict(CONSTANT.findall(cond))
        bound = BOUND.search(cond)
        return int(constants.get(bound[2], 1)) if bound else 1

    def total(name: str) -> float:
        if name not in seen:
            seen[name] = 0.0  # a cycle in the call graph (none in valid HLO) counts nothing
            cycles = 0.0
            for line in bodies.get(name, ()):
                cycles += value(line)
                if " while(" in line:
                    cycles += trips(line) * sum(total(b) for b in called(line, "body"))
                elif " conditional(" in line:
                    branches = called(line, "branch_computations")
                    branches += called(line, "true_computation")
                    branches += called(line, "false_computation")
                    cycles += max((total(b) for b in branches), default=0.0)
                elif " call(" in line:
                    cycles += sum(total(b) for b in called(line, "to_apply"))
            seen[name] = cycles
        return seen[name]

    return total(entry)


def sharded_abstract_params(spec: Any, mesh: Mesh, dtype: str) -> Any:
    """The parameters as `ShapeDtypeStruct`s under the rule table's shardings on `mesh`."""
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        spec.abstract_params(dtype),
        param_shardings(spec, mesh),
    )


def job_figures(
    job: Job, *, name: str = "jaxeval-plan", options: dict | None = None, cache: Any = None
) -> dict[str, Any]:
    """What the compiler says of `job` as plain numbers: `memory_analysis` and `cost_analysis`
    ("facts"), the HLO's counts ("hlo") and cycle estimate ("cycles"), the compile's seconds; or
    {"error": the compiler's words}. Read from `cache` (a `figures.FigureCache`) when it has them,
    else compiled (with `options` on top of the platform's) and kept there."""
    executables = Executables(name, compiler_options=options)
    key = cache.key(job, executables.options_for(job)) if cache is not None else None
    figures = cache.get(key) if cache is not None else None
    if figures is not None:
        return {**figures, "cached": True}
    start = time.perf_counter()
    try:
        executables.get(job)
    except Exception as e:  # the compiler's words (an HBM overflow is a RESOURCE_EXHAUSTED)
        figures = {"error": " ".join(str(e).split())}
    else:
        text = executables.text(job.key)
        figures = {
            "facts": {k: float(v) for k, v in executables.describe(job.key).items()},
            "hlo": hlo_facts(text),
            "cycles": estimated_cycles(text),
            "kernels": kernel_costs(text),
            "compile_s": time.perf_counter() - start,
        }
    if cache is not None:
        cache.put(key, figures)
    return figures


def compile_job(
    job: Job,
    *,
    name: str,
    kind: str,
    tokens: int,
    useful: float,
    cost: tuple[float, ...] | None = None,
    count_error: str | None = None,
    cache: Any = None,
) -> Compiled:
    """`job` compiled for its mesh's devices, described; a compiler error is caught and kept.
    `cost`: (FLOPs, bytes[, bytes once per call]) counted another way (`layer_costs`,
    `step_costs`), else the compiler's; `count_error`: why counting them failed, kept; `cache`:
    a `figures.FigureCache` (`job_figures`)."""
    figures = job_figures(job, cache=cache)
    if "error" in figures:
        return Compiled(
            name=name, kind=kind, tokens=tokens, useful_flops=useful, error=figures["error"],
            count_error=count_error, cached=bool(figures.get("cached")),
        )  # fmt: skip
    facts = figures["facts"]
    flops, nbytes, *once = (
        cost if cost is not None else (facts.get("flops", 0.0), facts.get("bytes_accessed", 0.0))
    )
    return Compiled(
        name=name,
        kind=kind,
        tokens=tokens,
        useful_flops=useful,
        argument_bytes=int(facts.get("argument_bytes", 0)),
        output_bytes=int(facts.get("output_bytes", 0)),
        alias_bytes=int(facts.get("alias_bytes", 0)),
        temp_bytes=int(facts.get("temp_bytes", 0)),
        flops=flops,
        bytes_accessed=nbytes,
        compile_s=figures["compile_s"],
        layers_counted=cost is not None,
        once_bytes=once[0] if once else 0.0,
        cycles=figures["cycles"],
        kernel_flops=figures["kernels"][0],
        kernel_bytes=figures["kernels"][1],
        count_error=count_error,
        cached=bool(figures.get("cached")),
        **figures["hlo"],
    )


# libtpu's options for the counting compiles: no windowed einsum (a collective matmul's loop), so
# that every matmul's FLOPs count in full
COUNTING_OPTIONS = {"xla_jf_spmd_threshold_for_windowed_einsum_mib": 1 << 20}


def counted_cost(job: Job, *, cache: Any = None) -> tuple[float, float]:
    """(FLOPs, bytes accessed) per chip of `job`, compiled with `COUNTING_OPTIONS` on TPUs (or read
    from `cache`, `job_figures`); a compiler error raises."""
    shardings = [getattr(x, "sharding", None) for x in jax.tree.leaves(job.args)]
    devices = {d.platform for s in shardings if s is not None for d in s.device_set}
    options = COUNTING_OPTIONS if devices == {"tpu"} else None
    figures = job_figures(job, name="jaxeval-plan-count", options=options, cache=cache)
    if "error" in figures:
        raise RuntimeError(figures["error"])
    facts = figures["facts"]
    return facts.get("flops", 0.0), facts.get("bytes_accessed", 0.0)


def first_layers(spec: Any, n: int) -> Any:
    """`spec` cut to its first `n` layers (run with `counting(runtime)` for exact costs)."""
    cut: dict[str, Any] = {
        "num_layers": n,
        "sliding_window": spec.sliding_window[:n],
        "attn_scale": spec.attn_scale[:n],
    }
    if spec.rope:
        cut["rope"] = spec.rope[:n]
    if spec.rope_layers:
        cut["rope_layers"] = spec.rope_layers[:n]
    return dataclasses.replace(spec, **cut)


def counting(runtime: Runtime) -> Runtime:
    """`runtime` with its layer scans unrolled: XLA's cost analysis then counts every layer."""
    return dataclasses.replace(runtime, unroll_layers=True)


def layer_period(spec: Any) -> int:
    """The smallest p such that the layers after the dense ones repeat every p layers (Gemma-2's
    alternating windows: 2)."""
    d, n = spec.dense_layers, spec.num_layers
    rows = list(zip(spec.sliding_window, spec.attn_scale, spec.rope_layers or [True] * n))[d:]
    for p in range(1, len(rows) + 1):
        if all(rows[i] == rows[i % p] for i in range(len(rows))):
            return p
    return len(rows)


def layer_costs(
    build: Callable, spec: Any, runtime: Runtime, mesh: Mesh, dtype: str, *, cache: Any = None
) -> tuple[float, float]:
    """(FLOPs, bytes) per chip of `build(spec, runtime, params)`'s executable, every layer counted.

    XLA's cost analysis counts a loop's body once, and the layers are a loop (`lax.scan`). So the
    executable is compiled for its first a = dense + 2 and a + p layers (p: `layer_period`),
    unrolled, and the cost extrapolated linearly to L layers: C(a) + (L - a) / p * (C(a+p) - C(a)).
    (From one layer on it is not linear: the TPU compiler treats a lone layer's matmuls apart.)
    These compiles also turn off the TPU's windowed einsums (`COUNTING_OPTIONS`), which turn each
    fsdp matmul into a loop over the weight's shards: the same FLOPs and bytes, counted once per
    shard otherwise. Loops inside a layer (the reference attention's block loops) still count once.
    """
    a, p, n = spec.dense_layers + 2, layer_period(spec), spec.num_layers
    points = [a, a + p] if a + p < n else [n]
    costs = []
    for k in points:
        cut = first_layers(spec, k)
        params = sharded_abstract_params(cut, mesh, dtype)
        costs.append(counted_cost(build(cut, counting(runtime), params), cache=cache))
    if len(costs) == 1:
        return costs[0]
    (fa, ba), (fb, bb) = costs
    scale = (n - a) / p
    return fa + scale * (fb - fa), ba + scale * (bb - ba)


def step_costs(
    steps: Callable, spec: Any, runtime: Runtime, mesh: Mesh, dtype: str, *, cache: Any = None
) -> tuple[float, float, float]:
    """(FLOPs, bytes) per chip of one step of a loop of steps, and the bytes moved once per call
    outside the loop (layout copies of the weights on entry, say).

    The cost analysis counts a loop's body once, on top of what runs before and after the loop.
    So `steps(n)` (the loop with n steps per iteration) is compiled for n = 1 and 2, every layer
    unrolled (a decode step's cost is not linear in a few layers: the compiler stages small caches
    through on-chip memory), and one step is the difference, but never more than the whole
    one-step call: the two-step program is partitioned on its own, and with one row a chip
    (Llama-3-8B, 8 rows on a v5e-8) the partitioner gathered every row's cache there, 16.7 GB
    against 3.3 GB for the one-step call, which the program that runs (one step an iteration)
    does not do.
    """
    cut = first_layers(spec, spec.num_layers)
    params = sharded_abstract_params(cut, mesh, dtype)
    (f1, b1), (f2, b2) = (
        counted_cost(steps(n)(cut, counting(runtime), params), cache=cache) for n in (1, 2)
    )
    flops, nbytes = min(f2 - f1, f1), min(b2 - b1, b1)
    return flops, nbytes, max(0.0, b1 - nbytes)
